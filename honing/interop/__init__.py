"""The other systems' surfaces, kept at honing's edge: their config files (Oumi, olmOCR, verl) translated to
honing's, and their Python names (OLMo-core's ``TrainerConfig`` and callbacks, VeOmni's trainer steps and events)
adapted once, so the core speaks only honing's own names."""
