"""Freezing parameters by module name or name pattern (``model.freeze_layers``), including the module names a
transformers-4 checkpoint used (Oumi's ``freeze_layers: [visual]`` for Qwen2-VL, whose tower transformers 5 keeps at
``model.visual``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from honing.errors import ConfigError
from honing.models.param_names import matches, named_parameters
from honing.models.wrappers import transformers_model, unwrap_model

log = logging.getLogger(__name__)

# Names that stand for a vision-language model's vision tower, whatever its family calls it (Oumi writes
# ``freeze_layers: ["vision_encoder"]``; transformers names it model.visual, model.vision_tower, ...)
VISION_TOWER_NAMES = ("vision_encoder", "vision_tower")
# How deep the module names an error message lists go (lm_head, model.visual, model.language_model, ...).
LISTED_DEPTH = 2


def freeze_layers(model: torch.nn.Module, patterns: Sequence[str], *, missing: str = "error") -> int:
    """Set ``requires_grad=False`` on every parameter under a module name (``model.visual``; ``vision_encoder``: the
    vision tower; a transformers-4 name such as ``visual``: where transformers 5 keeps that module) or matching a
    name pattern (``model.layers.0.*``); return how many parameter elements were trainable before and are frozen
    now. An entry that selects no parameter is a ConfigError naming it and the model's module names; with
    ``missing="skip"`` (``model.freeze_missing``), one warning saying the same."""
    params = list(named_parameters(model))
    names: set[str] = set()
    for index, pattern in enumerate(patterns):
        try:
            names.update(_entry_parameters(model, params, index, pattern))
        except ConfigError as error:
            if missing != "skip":
                raise
            log.warning("%s; skipped (model.freeze_missing: skip)", error)
    frozen = 0
    for name, param in params:
        if name in names and param.requires_grad:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


def _entry_parameters(
    model: torch.nn.Module, params: list[tuple[str, torch.nn.Parameter]], index: int, pattern: str
) -> list[str]:
    """The parameter names entry ``index`` of ``model.freeze_layers`` selects, as written or as transformers 5
    names the module (said in one info line); neither selecting any is a ConfigError."""
    found = _selected(model, params, pattern)
    if found:
        return found
    renamed = current_module_name(model, pattern)
    found = _selected(model, params, renamed) if renamed != pattern else []
    if not found:
        raise ConfigError(
            f"model.freeze_layers[{index}]: {pattern!r} matches no module or parameter of this model; its modules "
            f"are {', '.join(module_names(model))} (an entry is a module name such as model.layers.0, "
            f"{' or '.join(VISION_TOWER_NAMES)} for a vision tower, or a name pattern such as model.layers.0.*)"
        )
    log.info(
        "model.freeze_layers[%d]: %r names no module of this model; freezing %r, where transformers loads a "
        "checkpoint's %r (a transformers-4 name, or one without the base model's prefix)",
        index,
        pattern,
        renamed,
        pattern,
    )
    return found


def current_module_name(model: torch.nn.Module, name: str) -> str:
    """``name`` as transformers 5 names that module: transformers' own renamings of transformers-4 checkpoint keys
    for this model (``visual`` -> ``model.visual`` for Qwen2-VL, ``language_model`` -> ``model.language_model`` for
    llava), then its base-model prefix where the name lacks it (``vision_model`` -> ``model.vision_model`` for
    Idefics3), as it loads such a checkpoint; ``name`` itself when neither applies."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    hf_model = transformers_model(model)
    if not hasattr(hf_model, "config"):
        return name
    renamings = [
        transform
        for transform in get_model_conversion_mapping(hf_model, add_legacy=False)
        if isinstance(transform, WeightRenaming)
    ]
    # a checkpoint key names a tensor: a trailing dot lets patterns such as ``^vision_model\.`` match a module's name
    renamed = rename_source_key(name + ".", renamings, [])[0].removesuffix(".")
    prefix = getattr(hf_model, "base_model_prefix", "")
    modules = dict(hf_model.named_modules())
    head = renamed.split(".")[0]
    if prefix and head not in modules and f"{prefix}.{head}" in modules:
        return f"{prefix}.{renamed}"
    return renamed


def module_names(model: torch.nn.Module) -> list[str]:
    """The model's module names down to ``LISTED_DEPTH`` dots deep, each under its parent (for an error message)."""
    names = [name for name, _ in transformers_model(model).named_modules() if name]
    shallow = [name for name in names if name.count(".") < LISTED_DEPTH]
    # a module with children is shown by them (model -> model.visual, model.language_model)
    return [name for name in shallow if not any(other.startswith(name + ".") for other in shallow)]


def _selected(model: torch.nn.Module, params: list[tuple[str, torch.nn.Parameter]], pattern: str) -> list[str]:
    """The parameter names ``pattern`` selects (a vision-tower name: the family's tower)."""
    entries = _vision_tower(model) if pattern in VISION_TOWER_NAMES else [pattern]
    return [name for name, _ in params if any(_selects(entry, name) for entry in entries)]


def _selects(entry: str, name: str) -> bool:
    """A module name selects the parameters under it; anything else is an fnmatch pattern."""
    return name.startswith(entry + ".") or matches(name, [entry])


def _vision_tower(model: torch.nn.Module) -> list[str]:
    """The module names of a vision-language model's vision tower (its family's entry); none for a text model."""
    from honing.models.vl_families import family_for

    config = getattr(unwrap_model(model), "config", None)
    if config is None or getattr(config, "vision_config", None) is None:
        return []
    return list(family_for(config.model_type, model=unwrap_model(model)).vision_modules)
