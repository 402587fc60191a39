"""``optim.name``: the optimizers honing builds, the names other systems use for them, and which ``optim.*`` keys
each one reads (a key set for an optimizer that ignores it is refused in one line, as every unused key is).

The builder (``honing.optim.builder``) resolves the same table; it lives here because the config may import
nothing else of honing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from honing.config.optim_schema import OptimSection

#: honing's optimizer names (``optim.name``)
OPTIMIZERS = ("adamw", "sgd", "adafactor", "muon")

#: Hugging Face ``TrainingArguments.optim`` / olmOCR names → (honing's name, ``optim.fused`` they imply; None: the
#: device decides)
ALIASES: dict[str, tuple[str, bool | None]] = {
    "adamw_torch": ("adamw", False),  # HF: torch's AdamW with its foreach kernels
    "adamw_torch_fused": ("adamw", True),
    "adamw_hf": ("adamw", None),  # HF's former own AdamW; the same update
    "adam": ("adamw", None),
    "sgd_momentum": ("sgd", None),
    "adafactor_torch": ("adafactor", None),
}

#: the ``optim.*`` keys that only some optimizers read (lr, grad_clip, param_groups and vision_lr: every one)
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {
    "weight_decay": ("adamw", "sgd", "adafactor", "muon"),
    "betas": ("adamw", "muon"),  # Muon: the AdamW that trains what is not a hidden matrix
    "eps": ("adamw", "muon"),
    "fused": ("adamw", "sgd", "muon"),
    "momentum": ("sgd", "muon"),
    **{
        f"muon_{key}": ("muon",)
        for key in (
            "nesterov",
            "ns_steps",
            "adjust_lr",
            "adamw_lr",
            "lr_multiplier_head",
            "lr_multiplier_embed",
            "lr_multiplier_scalar",
        )
    },  # fmt: skip
    "state_dtype": ("adamw",),  # 8-bit AdamW states
    "bf16_stochastic_round": ("adamw",),
}


def resolve_optimizer(name: str) -> tuple[str, bool | None]:
    """``(honing's name, implied fused or None)`` for ``name`` or one of its aliases; ValueError names the choices."""
    lowered = name.strip().lower()
    if lowered in OPTIMIZERS:
        return lowered, None
    if lowered in ALIASES:
        return ALIASES[lowered]
    if lowered in ("lion", "lion_32bit", "lion_8bit", "paged_lion_32bit", "paged_lion_8bit"):
        raise ValueError(
            f"{name!r} is not available: torch 2.14 has no Lion and honing adds no library for it (Muon, which "
            "torch ships, is the newer alternative); use one of: " + ", ".join(OPTIMIZERS)
        )
    raise ValueError(
        f"unknown optimizer {name!r}; expected one of: {', '.join(OPTIMIZERS)} "
        f"(or the Hugging Face names {', '.join(ALIASES)})"
    )


def optimizer_key_refusals(section: OptimSection) -> list[str]:
    """One line per ``optim.*`` key the user set that ``optim.name``'s optimizer does not read."""
    name, _ = resolve_optimizer(section.name)
    lines = []
    for key in sorted(section.model_fields_set & OPTIONAL_KEYS.keys()):
        users = OPTIONAL_KEYS[key]
        value = getattr(section, key)
        # false is "off" for a switch such as fused, but muon_nesterov: false asks for something
        if name not in users and (value is not None if key.startswith("muon_") else value not in (None, False)):
            lines.append(f"optim.{key}: not used by optim.name {name!r} (used by: {', '.join(users)})")
    return lines
