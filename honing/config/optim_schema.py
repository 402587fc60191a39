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
    muon_nesterov: bool | None = None
    """muon: Nesterov momentum; None: true (torch.optim.Muon's and Keller Jordan's default)."""
    muon_ns_steps: int | None = Field(default=None, ge=1)
    """muon: Newton-Schulz iterations that orthogonalise each update; None: 5."""
    muon_adjust_lr: Literal["match_rms_adamw", "original"] | None = None
    """muon: how a matrix's LR is scaled by its shape: ``match_rms_adamw`` (Moonshot's 0.2 x sqrt(max(rows, cols)),
    AdamW's update size, so one lr serves both halves) or ``original`` (Keller Jordan's sqrt(max(1, rows / cols)),
    olmOCR's Muon); None: match_rms_adamw."""
    muon_adamw_lr: float | None = Field(default=None, gt=0)
    """muon: the LR of the AdamW half (embeddings, head, norms, biases, other shapes); None: ``lr``."""
    muon_lr_multiplier_head: float | None = Field(default=None, gt=0)
    """muon: the output head's AdamW LR is the AdamW half's LR x this (olmOCR's name; its default 11); None: 1."""
    muon_lr_multiplier_embed: float | None = Field(default=None, gt=0)
    """muon: the input embeddings' AdamW LR multiplier (olmOCR's default 30); None: 1."""
    muon_lr_multiplier_scalar: float | None = Field(default=None, gt=0)
    """muon: the 1-D parameters' (norms, biases) AdamW LR multiplier (olmOCR's default 2); None: 1."""
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


# transformers' SchedulerType names (``scheduler.semantics: transformers``) -> the lr_scheduler_kwargs each reads
TRANSFORMERS_SCHEDULES: dict[str, tuple[str, ...]] = {
    "linear": (),
    "cosine": ("num_cycles",),
    "cosine_with_restarts": ("num_cycles",),
    "polynomial": ("power", "lr_end"),
    "constant": (),
    "constant_with_warmup": (),
    "inverse_sqrt": ("timescale",),
    "cosine_with_min_lr": ("num_cycles", "min_lr", "min_lr_rate"),
    "cosine_warmup_with_min_lr": ("num_cycles", "min_lr", "min_lr_rate", "warmup_lr_rate"),
    "warmup_stable_decay": ("num_stable_steps", "num_decay_steps", "warmup_type", "decay_type", "min_lr_ratio",
                            "num_cycles"),
}  # fmt: skip
# transformers' schedules that follow a metric rather than the step: one line each, never a silent constant
METRIC_SCHEDULES = {
    "reduce_lr_on_plateau": "it lowers the LR when an evaluation metric stops improving",
    "greedy": "it moves the LR by the training loss it is handed each step (GreedyLR)",
}
HONING_SCHEDULES = ("constant", "linear", "cosine", "wsd")


class SchedulerKwargsSection(Section):
    """transformers' ``lr_scheduler_kwargs`` (``scheduler.semantics: transformers``): each read by the schedules its
    line names (another schedule refuses it), transformers' default where unset."""

    num_cycles: float | None = None
    """cosine / cosine_with_min_lr / cosine_warmup_with_min_lr / warmup_stable_decay: cosine waves (default 0.5,
    half a wave to the end); cosine_with_restarts: hard restarts (default 1)."""
    power: float | None = None
    """polynomial: the decay's power (default 1.0: linear)."""
    lr_end: float | None = Field(default=None, ge=0)
    """polynomial: the LR at the last step (default 1e-7; below ``optim.lr``)."""
    timescale: int | None = Field(default=None, ge=1)
    """inverse_sqrt: the time scale (default ``warmup_steps``, else 10000)."""
    min_lr: float | None = Field(default=None, ge=0)
    """cosine_with_min_lr / cosine_warmup_with_min_lr: the LR the cosine ends at (give this or ``min_lr_rate``)."""
    min_lr_rate: float | None = Field(default=None, ge=0, le=1)
    """cosine_with_min_lr / cosine_warmup_with_min_lr: the end LR as a share of ``optim.lr`` (or ``min_lr``)."""
    warmup_lr_rate: float | None = Field(default=None, ge=0, le=1)
    """cosine_warmup_with_min_lr: the first step's LR as a share of the peak; None: 1/warmup_steps."""
    num_stable_steps: int | None = Field(default=None, ge=0)
    """warmup_stable_decay: steps at the peak LR; None: the run's steps less warmup and decay."""
    num_decay_steps: int | None = Field(default=None, ge=0)
    """warmup_stable_decay: steps of decay at the end (required)."""
    warmup_type: Literal["linear", "cosine", "1-sqrt"] | None = None
    """warmup_stable_decay: the warmup's shape (default linear)."""
    decay_type: Literal["linear", "cosine", "1-sqrt"] | None = None
    """warmup_stable_decay: the decay's shape (default cosine)."""
    min_lr_ratio: float | None = Field(default=None, ge=0, le=1)
    """warmup_stable_decay: the LR warmup starts from and decay ends at, as a share of the peak (default 0)."""


class SchedulerSection(Section):
    """Learning-rate schedule: honing's (a linear warmup from 1/warmup_steps, decay to ``min_lr_ratio``), or
    transformers' ``get_scheduler`` step for step (``semantics: transformers``)."""

    semantics: Literal["honing", "transformers"] = "honing"
    """``honing``: the names below with honing's warmup (its first step at 1/warmup_steps of the peak) and floor;
    ``transformers``: ``name`` is a transformers ``lr_scheduler_type`` and each step's LR is exactly what
    ``transformers.get_scheduler`` gives that optimizer step (warmup from 0, ``constant`` without warmup), its
    ``lr_scheduler_kwargs`` in ``kwargs``."""
    name: str = "cosine"
    """honing: ``constant``, ``linear`` or ``cosine`` decay to ``min_lr_ratio``, or ``wsd`` (warmup, stable, decay);
    transformers: ``linear``, ``cosine``, ``cosine_with_restarts``, ``polynomial``, ``constant``,
    ``constant_with_warmup``, ``inverse_sqrt``, ``cosine_with_min_lr``, ``cosine_warmup_with_min_lr`` or
    ``warmup_stable_decay``."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warmup from 0 to the peak LR."""
    warmup_ratio: float | None = Field(default=None, ge=0, lt=1)
    """Warmup as a share of the total steps (instead of ``warmup_steps``); None: ``warmup_steps``."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """honing: the LR the schedule ends at, as a share of the peak LR."""
    decay_fraction: float = Field(default=0.2, gt=0, le=1)
    """honing's ``wsd``: the share of the steps, at the end, over which the LR decays linearly."""
    kwargs: SchedulerKwargsSection = Field(default_factory=SchedulerKwargsSection)
    """``semantics: transformers``: the schedule's ``lr_scheduler_kwargs`` (a key the named schedule does not read
    is refused)."""

    @model_validator(mode="after")
    def _one_warmup(self) -> SchedulerSection:
        if self.warmup_ratio is not None and "warmup_steps" in self.model_fields_set:
            raise ValueError("give scheduler.warmup_steps or scheduler.warmup_ratio, not both")
        return self

    @model_validator(mode="after")
    def _known_schedule(self) -> SchedulerSection:
        given = sorted(self.kwargs.model_fields_set)
        if self.semantics == "honing":
            if self.name not in HONING_SCHEDULES:
                also = ""
                if self.name in TRANSFORMERS_SCHEDULES:
                    also = " (a transformers name: set scheduler.semantics: transformers)"
                raise ValueError(
                    f"scheduler.name: {self.name!r} is not one of honing's schedules "
                    f"({', '.join(HONING_SCHEDULES)}){also}"
                )
            if given:
                raise ValueError(f"scheduler.kwargs.{given[0]}: read under scheduler.semantics: transformers only")
            return self
        if self.name in METRIC_SCHEDULES:
            raise ValueError(
                f"scheduler.name: {self.name!r} is not available: {METRIC_SCHEDULES[self.name]}; use a step schedule "
                "such as cosine_with_min_lr or constant"
            )
        if self.name not in TRANSFORMERS_SCHEDULES:
            raise ValueError(
                f"scheduler.name: {self.name!r} is not a transformers schedule; expected one of "
                f"{', '.join(TRANSFORMERS_SCHEDULES)}"
            )
        for honing_only in ("min_lr_ratio", "decay_fraction"):
            if honing_only in self.model_fields_set:
                raise ValueError(
                    f"scheduler.{honing_only}: honing's own key, not read under scheduler.semantics: transformers "
                    "(give scheduler.kwargs as transformers' lr_scheduler_kwargs)"
                )
        for key in given:
            if key not in TRANSFORMERS_SCHEDULES[self.name]:
                reads = ", ".join(TRANSFORMERS_SCHEDULES[self.name]) or "none"
                raise ValueError(f"scheduler.kwargs.{key}: not read by transformers' {self.name!r} (it reads: {reads})")
        if self.name == "constant" and (self.warmup_steps or self.warmup_ratio):
            raise ValueError(
                "scheduler: transformers' 'constant' has no warmup (it ignores warmup_steps); use "
                "'constant_with_warmup', or drop the warmup"
            )
        kwargs = self.kwargs
        if self.name.endswith("with_min_lr") and (kwargs.min_lr is None) == (kwargs.min_lr_rate is None):
            raise ValueError(f"scheduler.kwargs: {self.name!r} needs exactly one of min_lr and min_lr_rate")
        if self.name == "warmup_stable_decay" and kwargs.num_decay_steps is None:
            raise ValueError("scheduler.kwargs.num_decay_steps: required by 'warmup_stable_decay'")
        return self
