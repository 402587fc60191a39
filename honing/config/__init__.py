"""The run config: typed sections, YAML loading, overrides and secrets redaction.

This package imports nothing else of honing, so every layer may import it.
"""

from honing.config.errors import ConfigError, HoningError
from honing.config.loading import apply_override, load_config, read_yaml, validate
from honing.config.redact import REDACTED, redact, to_yaml
from honing.config.schema import RunConfig

__all__ = [
    "ConfigError",
    "HoningError",
    "RunConfig",
    "load_config",
    "read_yaml",
    "apply_override",
    "validate",
    "redact",
    "to_yaml",
    "REDACTED",
]
