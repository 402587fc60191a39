"""Error types for user mistakes (config, data, paths): the CLI prints them on one line and exits 2."""


class HoningError(Exception):
    """A user error: the message names the key, file or row and what was expected."""


class ConfigError(HoningError):
    """A config file or override is invalid."""
