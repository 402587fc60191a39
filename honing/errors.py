"""All of honing's user-error types in one place (the config layer defines the base)."""

from honing.config.errors import ConfigError, HoningError


class DataError(HoningError):
    """A data file, row or source is invalid or missing."""


class CheckpointError(HoningError):
    """A checkpoint is missing, incomplete or unreadable."""


class NonFiniteLossError(HoningError):
    """The training loss became NaN or infinite; the run stops before saving the broken weights."""


__all__ = ["HoningError", "ConfigError", "DataError", "CheckpointError", "NonFiniteLossError"]
