"""LoRA adapters through peft (freezing parameters by name: ``honing.models.freeze``)."""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from honing.errors import ConfigError
from honing.models.param_names import example_names

if TYPE_CHECKING:
    from peft import PeftModel

log = logging.getLogger(__name__)


class LoraSettings(Protocol):
    """What LoRA reads of a ``model.lora`` section (or of a copy with another task type, ``reward_lora``)."""

    rank: int
    alpha: float
    dropout: float
    bias: str
    target_modules: str | list[str]
    target_parameters: list[str]
    task_type: str
    modules_to_save: list[str] | None
    missing_targets: str


def lora_keywords(lora: LoraSettings) -> dict[str, Any]:
    """``apply_lora``'s keywords from ``lora``: its settings carry apply_lora's names, each read here."""
    return {name: getattr(lora, name) for name in LoraSettings.__annotations__}


def apply_lora(
    model: torch.nn.Module,
    *,
    rank: int = 8,
    alpha: float = 16,
    dropout: float = 0.0,
    bias: str = "none",
    target_modules: str | list[str] = "all-linear",
    target_parameters: Sequence[str] = (),
    task_type: str = "CAUSAL_LM",
    modules_to_save: list[str] | None = None,
    missing_targets: str = "error",
) -> PeftModel:
    """Wrap ``model`` in a peft ``PeftModel`` with LoRA adapters; base weights are frozen, adapters train.

    The adapters are injected into ``model`` in place; train and save the returned wrapper.
    """
    from peft import LoraConfig, TaskType, get_peft_model

    module_names = [name for name, _ in model.named_modules() if name]
    check_target_modules(model, target_modules, missing_targets)
    check_target_parameters(model, target_parameters)
    for index, wanted in enumerate(modules_to_save or []):
        if not any(name == wanted or name.endswith(f".{wanted}") for name in module_names):
            raise ConfigError(
                f"model.lora.modules_to_save[{index}]: {wanted!r} matches no module; module names "
                f"end in {example_names(leaf_names(model, torch.nn.Module))}"
            )
    if task_type not in {task.value for task in TaskType}:
        raise ConfigError(
            f"model.lora.task_type: {task_type!r} is not a peft task type; expected one of "
            f"{', '.join(task.value for task in TaskType)}"
        )
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        bias=bias,
        target_modules=target_modules,
        task_type=task_type,
        modules_to_save=modules_to_save,
        # peft's LoRA on a bare parameter (an MoE's experts held as one tensor); peft >= 0.17 has the keyword
        **({"target_parameters": list(target_parameters)} if target_parameters else {}),
    )
    try:
        with warnings.catch_warnings():
            # peft asks transformers about gradient checkpointing through a name transformers 5 deprecates
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            # on a QLoRA int8 base: peft cannot merge into torchao's int8 weights, and honing never asks it to
            # (exports merge into the de-quantized weights, honing.export.hf_folder.merged_model)
            warnings.filterwarnings("ignore", message=".*TorchaoLoraLinear was instantiated without.*")
            # target_parameters: peft keys the parameters' ranks by pattern and then reports them unmatched by module
            warnings.filterwarnings("ignore", message=".*_pattern keys did not match any targeted module.*")
            return get_peft_model(model, config)
    except ValueError as error:  # e.g. a target that names a container module peft cannot adapt
        # peft prints the whole module tree of the offender; its class name is enough on one line
        reason = " ".join(re.sub(r"\(\n.*\n\)", "", str(error), flags=re.DOTALL).split())
        raise ConfigError(f"model.lora.target_modules: {target_modules!r}: peft refused it: {reason}") from None


def check_target_modules(
    model: torch.nn.Module, target_modules: str | list[str], missing_targets: str = "error"
) -> None:
    """Raise ConfigError unless every target matches a module, by peft's rules; with ``missing_targets`` ``skip``
    (``model.lora.missing_targets``), only when none does, as peft, the ones skipped named in one line.

    peft reads a string as a regular expression over the full module name ("all-linear" is special) and
    a list entry as a module name or its last dotted parts; it only fails when nothing at all matches.
    """
    names = [name for name, _ in model.named_modules() if name]
    linear = example_names(leaf_names(model, torch.nn.Linear))
    if isinstance(target_modules, str):
        if target_modules.lower() == "all-linear":
            return
        try:
            pattern = re.compile(target_modules)
        except re.error as error:
            raise ConfigError(
                f"model.lora.target_modules: {target_modules!r} is not a valid regular expression "
                f"({error}); give a list of module names to match name endings"
            ) from None
        if any(pattern.fullmatch(name) for name in names):
            return
        example = next(
            (name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)),
            names[0] if names else "",
        )
        raise ConfigError(
            f"model.lora.target_modules: {target_modules!r} matches no module (a string is a regular "
            f"expression over whole module names such as {example!r}; a list matches name endings); "
            f"linear modules are named {linear}"
        )
    unmatched = [
        target for target in target_modules if not any(name == target or name.endswith(f".{target}") for name in names)
    ]
    if unmatched and (missing_targets == "error" or len(unmatched) == len(target_modules)):
        raise ConfigError(
            f"model.lora.target_modules: {target_modules!r}: {', '.join(map(repr, unmatched))} "
            f"matches no module; linear modules are named {linear}"
        )
    if unmatched:  # peft's rule: adapters where a name matches, the others passed over
        log.info(
            "model.lora.target_modules: %s match no module of this model, skipped (model.lora.missing_targets: skip); "
            "adapters on %s",
            ", ".join(unmatched),
            ", ".join(target for target in target_modules if target not in unmatched),
        )


def check_target_parameters(model: torch.nn.Module, target_parameters: Sequence[str]) -> None:
    """Raise ConfigError unless every entry names a parameter, by peft's rule for ``target_parameters``: the full
    parameter name or its last dotted parts (``7.mlp.experts.down_proj``)."""
    names = [name for name, _ in model.named_parameters()]
    for index, target in enumerate(target_parameters):
        if not any(name == target or name.endswith(f".{target}") for name in names):
            raise ConfigError(
                f"model.lora.target_parameters[{index}]: {target!r} matches no parameter; give a parameter's name or "
                f"its last dotted parts, e.g. {example_names(names)}"
            )


def leaf_names(model: torch.nn.Module, kind: type) -> list[str]:
    """The distinct last name parts of ``model``'s submodules of type ``kind``, in model order."""
    seen: dict[str, None] = {}
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if name and isinstance(module, kind) and not leaf.isdigit():  # "layers.0" says nothing useful
            seen.setdefault(leaf, None)
    return list(seen)
