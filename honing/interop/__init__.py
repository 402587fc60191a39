"""The other systems' surfaces, kept at honing's edge: their config files (Oumi, olmOCR, verl) translated to
honing's, their data formats and reward signatures (plugged into the core's extension points by ``registrations``,
which the root package imports), and their Python names (OLMo-core's ``TrainerConfig`` and callbacks, VeOmni's
trainer steps and events) adapted once, so the core speaks only honing's own names."""

from honing.interop import registrations  # noqa: F401  (fills honing.extensions)
