"""A pretrained model's shape without its weights: the config a hub name or folder describes, read from the
folder or the hub, or built from the numbers a config carries (``model.shape``) where the hub cannot be reached.

A carried shape is a copy of the model's ``config.json`` numbers; when the real config can be read as well, the two
must agree, so a preset that names one model and carries another's numbers is refused rather than planned wrongly.
Both sides are compared after transformers has read them (a key that transformers moved, such as ``rope_theta``
into ``rope_parameters``, is compared where it now lives), on the keys the shape sets.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

from transformers import AutoConfig, PretrainedConfig

from honing.errors import ConfigError
from honing.hub import check_name_or_path, error_chain, hub_load_error, is_hub_id

log = logging.getLogger(__name__)

# what a config.json records about how it was written, not about the model's shape
METADATA_KEYS = frozenset(
    {"architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "use_cache", "output_attentions",
     "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type", "chunk_size_feed_forward"}
)  # fmt: skip
MISSING = object()


def config_from_shape(shape: Mapping[str, Any]) -> PretrainedConfig:
    """The transformers config of a carried ``model.shape`` (a ``config.json`` mapping with ``model_type``)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    values = copy.deepcopy(dict(shape))  # transformers edits nested mappings (rope_scaling) in place
    model_type = values.pop("model_type", None)
    if model_type not in CONFIG_MAPPING:
        raise ConfigError(
            f"model.shape.model_type: {model_type!r} is not a model type this transformers knows "
            "(e.g. llama, qwen2, qwen3_moe, gemma2)"
        )
    try:
        return CONFIG_MAPPING[model_type].from_dict(values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"model.shape: {' '.join(str(error).split())}") from None


def is_hub_name(name_or_path: str) -> bool:
    """True for a hub name (``Qwen/Qwen2.5-7B``) rather than a folder here."""
    return is_hub_id(name_or_path) and not os.path.isdir(name_or_path)


def unreachable_hub(name_or_path: str, error: BaseException) -> bool:
    """True when ``error`` (transformers' OSError) says that the hub name ``name_or_path`` could not be fetched and
    the cache lacks its files, rather than that the repository does not exist or is refused."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return is_hub_name(name_or_path) and any(isinstance(cause, LocalEntryNotFoundError) for cause in error_chain(error))


def pretrained_config(
    name_or_path: str,
    *,
    shape: Mapping[str, Any] | None = None,
    trust_remote_code: bool = False,
    use_shape_offline: bool = True,
) -> PretrainedConfig:
    """The config of the model at ``name_or_path``, compared with ``shape`` when both exist; where a hub name cannot
    be read, ``shape``'s (``use_shape_offline``: planning, not training) or a one-line error naming the fix."""
    check_name_or_path(name_or_path, "model.name_or_path")
    try:
        real = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    except OSError as error:
        unreachable = unreachable_hub(name_or_path, error)
        if shape is not None and use_shape_offline and is_hub_name(name_or_path):
            reason = "the hub cannot be reached" if unreachable else one_line(error).split(". ")[0]  # gated, ...
            log.info("model.shape: using the shape this config carries (%s's config.json: %s)", name_or_path, reason)
            return config_from_shape(shape)
        refusal = hub_load_error("model.name_or_path", name_or_path, error)
        if unreachable and use_shape_offline:  # a carried shape plans a run; only the weights train one
            refusal = ConfigError(
                f"{refusal}; or, to plan, give model.shape (its config.json numbers, as configs/models/ do)"
            )
        raise refusal from None
    if shape is not None:
        check_shape(shape, real, where=name_or_path)
    return real


def one_line(error: BaseException) -> str:
    """An error's message on one line (transformers' span several)."""
    return " ".join(str(error).split())


def check_shape(shape: Mapping[str, Any], real: PretrainedConfig, *, where: str) -> None:
    """Refuse, in one line naming the key and both values, a carried shape that differs from the model's config."""
    if shape.get("model_type") != real.model_type:
        raise ConfigError(
            f"model.shape.model_type: {shape.get('model_type')!r}, but {where}'s config.json has {real.model_type!r}; "
            "correct model.shape or model.name_or_path"
        )
    carried = config_from_shape(shape)
    default = type(carried)().to_dict()
    mismatch = first_difference(dict(shape), carried.to_dict(), default, real.to_dict(), "model.shape")
    if mismatch is not None:
        key, ours, theirs = mismatch
        found = "no such key" if theirs is MISSING else short(theirs)
        raise ConfigError(
            f"{key}: {short(ours)}, but {where}'s config.json has {found}; correct model.shape (or model.name_or_path)"
        )


def short(value: object) -> str:
    """``repr(value)``, cut to 60 characters (a per-layer list is long)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def first_difference(
    given: Mapping[str, Any], carried: Mapping[str, Any], default: Mapping[str, Any], real: Mapping[str, Any], path: str
) -> tuple[str, Any, Any] | None:
    """The first key the shape sets (given, or changed from the family's default) whose value differs from the real
    config's: ``(key path, carried value, real value)``; None when they agree. A given key that transformers moved
    (``rope_theta`` into ``rope_parameters``, a vision-language model's text numbers into ``text_config``) counts
    as given in the sections below, where it now lives."""
    moved = {key: value for key, value in given.items() if key not in carried}
    below = dict(moved)
    for value in moved.values():
        if isinstance(value, Mapping):  # rope_scaling's numbers now sit in rope_parameters
            below.update(value)
    # the keys given first, so that a wrong depth is named rather than the per-layer list it derives
    for key in sorted(carried, key=lambda key: (key not in given, isinstance(carried[key], Mapping), key)):
        if key in METADATA_KEYS or key.startswith("_"):
            continue
        ours, theirs = carried[key], real.get(key, MISSING)
        if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
            nested = given.get(key) if isinstance(given.get(key), Mapping) else {}
            nested_default = default.get(key) if isinstance(default.get(key), Mapping) else {}
            found = first_difference({**below, **nested}, ours, nested_default, theirs, f"{path}.{key}")
            if found is not None:
                return found
        elif (key in given or ours != default.get(key, MISSING)) and ours != theirs:
            return f"{path}.{key}", ours, theirs
    return None
