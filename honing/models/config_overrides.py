"""``model.config_overrides``: a pretrained model's config with some fields replaced (YaRN's ``rope_scaling``, a longer
``max_position_embeddings``) before the model is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import PretrainedConfig

from honing.errors import ConfigError

# the RoPE fields of a transformers 4 config.json, which transformers 5 keeps in one ``rope_parameters`` mapping
LEGACY_ROPE_KEYS = ("rope_theta", "rope_scaling")


def apply_config_overrides(config: PretrainedConfig, overrides: Mapping[str, Any]) -> PretrainedConfig:
    """A new config of ``config``'s class with ``overrides`` applied; a field the config does not have is refused.

    The config is rebuilt through its class rather than changed attribute by attribute, so that fields that depend on
    each other stay whole. ``rope_scaling`` (as Oumi, axolotl and model cards write YaRN) and ``rope_theta`` update
    transformers 5's ``rope_parameters``, the model's own ``rope_theta`` kept under a ``rope_scaling`` that does not
    name one (as transformers 4, where they were two fields)."""
    if not overrides:
        return config
    rope = getattr(config, "rope_parameters", None)
    known = LEGACY_ROPE_KEYS if isinstance(rope, Mapping) else ()
    unknown = sorted(key for key in overrides if not hasattr(config, key) and key not in known)
    if unknown:
        raise ConfigError(
            f"model.config_overrides.{unknown[0]}: not a field of the {config.model_type} config; give one of its "
            "config.json keys (e.g. rope_scaling, max_position_embeddings)"
        )
    values = {**config.to_dict(), **overrides}
    if isinstance(rope, Mapping) and any(key in overrides for key in (*LEGACY_ROPE_KEYS, "rope_parameters")):
        scaling = overrides.get("rope_parameters", overrides.get("rope_scaling"))
        merged = dict(scaling) if isinstance(scaling, Mapping) else dict(rope)
        theta = overrides.get("rope_theta", merged.get("rope_theta", rope.get("rope_theta")))
        if theta is not None:
            merged["rope_theta"] = theta
        for key in LEGACY_ROPE_KEYS:
            values.pop(key, None)
        values["rope_parameters"] = merged
    try:
        return type(config).from_dict(values)
    except (ValueError, TypeError, KeyError) as error:  # transformers' own checks, e.g. an unknown rope_type
        raise ConfigError(f"model.config_overrides: {error}".splitlines()[0]) from None
