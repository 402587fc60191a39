"""honing: a torch-native trainer for language and vision-language models."""

# The first sample of the cores' busy time, taken before anything else is imported: a run's imports and setup are
# the window over which it sees how busy the machine is before choosing its CPU threads (honing.train.cpu_load).
from honing import cpu_busy as _cpu_busy  # noqa: F401

# The other systems' rewards and data formats plug into the core's extension points (honing.extensions) by path, so
# every use of honing (the CLI, a recipe, a reward resolved from Python) finds them while the core modules name none
# of them; this imports three small modules and nothing outside the standard library.
from honing.interop import registrations as _edge  # noqa: F401
