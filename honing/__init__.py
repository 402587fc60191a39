"""honing: a torch-native trainer for language and vision-language models."""

# The other systems' rewards and data formats plug into the core's extension points (honing.extensions) by path, so
# every use of honing (the CLI, a recipe, a reward resolved from Python) finds them while the core modules name none
# of them; this imports three small modules and nothing outside the standard library.
from honing.interop import registrations as _edge  # noqa: F401
