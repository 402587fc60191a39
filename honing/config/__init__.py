"""The run config: typed sections, YAML loading, overrides and secrets redaction; ``method`` selects which keys
are used (``honing.config.methods``), and ``track_reads`` records which keys a run reads (``honing.config.keys``).

This package imports nothing else of honing, so every layer may import it.
"""

from honing.config.errors import ConfigError, HoningError
from honing.config.keys import KeyReads, leaf_keys, track_reads
from honing.config.loading import apply_override, load_config, read_yaml, validate
from honing.config.methods import METHODS, Method
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
    "METHODS",
    "Method",
    "KeyReads",
    "track_reads",
    "leaf_keys",
]
