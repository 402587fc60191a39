"""The run config: typed sections, YAML loading, overrides and secrets redaction; ``method`` selects which keys
are used (``honing.config.methods``), and ``track_reads`` records which keys a run reads (``honing.config.keys``).
Each field's docstring is its description: ``honing.config.reference`` renders them all (``honing config keys``,
``docs/reference/config.md``).

``load_config`` reads honing's own YAML; another system's config file (Oumi, olmOCR) is translated and loaded at
the edge, by ``honing.interop.configs.load_any_config``. This package imports nothing else of honing, so every
layer may import it.
"""

from honing.config.errors import ConfigError, HoningError
from honing.config.keys import KeyReads, leaf_keys, track_reads
from honing.config.loading import apply_override, apply_overrides, load_config, read_yaml, validate
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
    "apply_overrides",
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
