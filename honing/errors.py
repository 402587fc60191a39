"""All of honing's user-error types in one place (the config layer defines the base)."""

from honing.config.errors import ConfigError, HoningError


class DataError(HoningError):
    """A data file, row or source is invalid or missing."""


class CheckpointError(HoningError):
    """A checkpoint is missing, incomplete or unreadable."""


class CheckpointMismatchError(ConfigError):
    """A whole checkpoint whose saved tensors do not fit this run's model or optimizer: a config difference, not
    damage, so no older checkpoint is tried and nothing is moved aside."""


class NonFiniteLossError(HoningError):
    """The training loss became NaN or infinite; the run stops before saving the broken weights."""


__all__ = [
    "HoningError",
    "ConfigError",
    "DataError",
    "CheckpointError",
    "CheckpointMismatchError",
    "NonFiniteLossError",
]
