"""The ``optim`` section (the optimizer and its parameter groups) and the ``scheduler`` section (the LR schedule)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from honing.config.optimizers import resolve_optimizer
from honing.config.section import Section


class ParamGroupSection(Section):
    """Parameters matching ``params`` (name patterns) trained with their own LR / weight decay."""

    params: str | list[str]
    """Parameter name patterns (globs) that belong to the group."""
    lr: float | None = Field(default=None, gt=0)
    """The group's learning rate; None: ``optim.lr``."""
    weight_decay: float | None = Field(default=None, ge=0)
    """The group's weight decay; None: ``optim.weight_decay``."""


class OptimSection(Section):
    """The optimizer (``name``: adamw, sgd, adafactor, muon, or a Hugging Face alias such as adamw_torch_fused);
    weight decay skips biases, norms and embeddings. Keys the chosen optimizer does not read are refused."""

    name: str = "adamw"
    """``adamw``, ``sgd``, ``adafactor`` or ``muon``, or a Hugging Face alias (``honing.config.optimizers``)."""
    momentum: float | None = Field(default=None, ge=0)
    """sgd's and muon's momentum; None: 0.9 for sgd, 0.95 for muon."""
    lr: float = Field(default=3e-4, gt=0)
    """The peak learning rate (the schedule scales it)."""
    weight_decay: float = Field(default=0.1, ge=0)
    """Decoupled weight decay, on every weight but biases, norms and embeddings."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW's decay rates of its two moment estimates."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW's term added to the denominator for numerical stability."""
    grad_clip: float | None = Field(default=1.0, gt=0)
    """Gradients are clipped to this total norm before each step; None: no clipping."""
    fused: bool | None = None
    """Use the fused kernel (true) or the foreach ones (false); None: fused where the device has it."""
    param_groups: list[ParamGroupSection] = Field(default_factory=list)
    """Groups of parameters, by name pattern, with their own LR and weight decay."""
    vision_lr: float | None = Field(default=None, gt=0)
    """Vision-language SFT: the vision tower's own learning rate; None: ``lr``."""
    state_dtype: Literal["int8"] | None = None
    """``int8``: AdamW's two moments held in 8 bits (torchao's AdamW8bit, blockwise scales); None: the parameters'
    dtype."""
    bf16_stochastic_round: bool = False
    """With ``state_dtype: int8`` and bf16 weights: round the weight updates stochastically."""

    @model_validator(mode="after")
    def _rounding_needs_int8(self) -> OptimSection:
        if self.bf16_stochastic_round and self.state_dtype != "int8":
            raise ValueError(
                "optim.bf16_stochastic_round: used only with optim.state_dtype: int8 (torchao's AdamW8bit); "
                "set optim.state_dtype: int8 or remove it"
            )
        return self

    @field_validator("name")
    @classmethod
    def _known_optimizer(cls, value: str) -> str:
        resolve_optimizer(value)  # its ValueError names the choices
        return value


class SchedulerSection(Section):
    """Learning-rate schedule with linear warmup."""

    name: Literal["constant", "linear", "cosine", "wsd"] = "cosine"
    """``constant``, ``linear`` or ``cosine`` decay to ``min_lr_ratio``, or ``wsd`` (warmup, stable, decay)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warmup from 0 to the peak LR."""
    warmup_ratio: float | None = Field(default=None, ge=0, lt=1)
    """Warmup as a share of the total steps (instead of ``warmup_steps``); None: ``warmup_steps``."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """The LR the schedule ends at, as a share of the peak LR."""
    decay_fraction: float = Field(default=0.2, gt=0, le=1)
    """``wsd``: the share of the steps, at the end, over which the LR decays linearly."""

    @model_validator(mode="after")
    def _one_warmup(self) -> SchedulerSection:
        if self.warmup_ratio is not None and "warmup_steps" in self.model_fields_set:
            raise ValueError("give scheduler.warmup_steps or scheduler.warmup_ratio, not both")
        return self
