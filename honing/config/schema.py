"""The run config: one typed model per section, validated by pydantic.

Pydantic rather than dataclasses: it gives type coercion from YAML, error locations as
key paths, and a JSON schema for editors, which we would otherwise write by hand. Each
section lives in the file named for it (``trainer_schema``, ``data_schema``, ``model_schema``,
``optim_schema``, ``parallel_schema``, ``callbacks_schema``, ``evaluation``, and one per method's section:
``sft_schema``, ``grpo_schema``, ``dpo_schema``, ``kto_schema``, ...);
this module assembles them into ``RunConfig`` and names them all for importers. The string under
each field is its description (``Section``'s ``use_attribute_docstrings``).

``method`` selects which keys are used: ``honing.config.methods`` holds the per-method table
(and how to add a method), and ``RunConfig`` refuses every key the user set that its method
does not read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from honing.config.callbacks_schema import CallbacksSection
from honing.config.cpo_schema import CPOSection
from honing.config.custom_recipe import resolve_recipe_keys
from honing.config.data_schema import DataSection, SourceSection, SplitSection, TokenizerSection
from honing.config.distill_schema import DistillSection
from honing.config.dpo_schema import DPOSection
from honing.config.evaluation import HarnessEvalSection, ModelCardSection
from honing.config.grpo_schema import GRPORewardSection, GRPOSection
from honing.config.kto_schema import KTOSection
from honing.config.methods import METHODS, methods_json, refusals
from honing.config.model_schema import LoraSection, ModelSection
from honing.config.online_dpo_schema import OnlineDPOSection
from honing.config.optim_schema import OptimSection, ParamGroupSection, SchedulerSection
from honing.config.optimizers import optimizer_key_refusals
from honing.config.orpo_schema import ORPOSection
from honing.config.parallel_schema import ParallelSection
from honing.config.ppo_schema import PPOSection
from honing.config.reward_schema import RewardSection
from honing.config.rloo_schema import RLOOSection
from honing.config.section import Section
from honing.config.sft_schema import SFTSection
from honing.config.trainer_schema import DURATION_PATTERN, StepRange, StorageSection, TrainerSection

__all__ = [
    "DURATION_PATTERN",
    "CPOSection",
    "CallbacksSection",
    "DPOSection",
    "DataSection",
    "GRPORewardSection",
    "GRPOSection",
    "HarnessEvalSection",
    "LoraSection",
    "ModelCardSection",
    "ModelSection",
    "ORPOSection",
    "OptimSection",
    "ParallelSection",
    "ParamGroupSection",
    "RunConfig",
    "SFTSection",
    "SchedulerSection",
    "Section",
    "SourceSection",
    "SplitSection",
    "StepRange",
    "StorageSection",
    "TokenizerSection",
    "TrainerSection",
]


MethodName = Literal[tuple(METHODS)]  # type: ignore[valid-type]  # one entry per method in the table


class RunConfig(Section):
    """The whole run: what to train, on what data, for how long, and what to record."""

    model_config = ConfigDict(json_schema_extra={"x-honing-methods": methods_json()})

    method: MethodName = "pretrain"
    """The training method: ``pretrain``, ``sft``, ``vl_sft``, ``dpo``, ``orpo``, ``cpo`` (CPO and SimPO), ``grpo``,
    ``vl_grpo`` (GRPO on image prompts), ``rloo``, ``ppo``, ``online_dpo`` or ``distill``; it picks the recipe and
    which keys are used (``honing.config.methods``)."""
    recipe: str | None = None
    """Your own recipe class, a subclass of the method's, as ``package.module:ClassName`` (``method: pkg:Class``
    too); None: the method's own recipe."""
    run_name: str | None = None
    """The run's name in W&B and on the model card; None: none given."""
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    """Where the run writes, how long it trains, and how it resumes."""
    data: DataSection
    """What the model reads and how it is batched."""
    tokenizer: TokenizerSection = Field(default_factory=TokenizerSection)
    """Which tokenizer."""
    model: ModelSection
    """Which model, and what of it trains."""
    optim: OptimSection = Field(default_factory=OptimSection)
    """The optimizer."""
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    """The learning-rate schedule."""
    callbacks: CallbacksSection = Field(default_factory=CallbacksSection)
    """Checkpoints, evaluation, logging and the rest of what runs beside the training step."""
    parallel: ParallelSection = Field(default_factory=ParallelSection)
    """How several processes share the training."""
    storage: StorageSection = Field(default_factory=StorageSection)
    """Remote storage for ``s3://`` paths."""
    sft: SFTSection | None = None
    """SFT's settings (``method: sft`` only); None: the defaults."""
    grpo: GRPOSection | None = None
    """GRPO's settings (``method: grpo`` and ``vl_grpo`` only)."""
    dpo: DPOSection | None = None
    """DPO's settings (``method: dpo`` only); None: the defaults."""
    orpo: ORPOSection | None = None
    """ORPO's settings (``method: orpo`` only); None: the defaults."""
    cpo: CPOSection | None = None
    """CPO's and SimPO's settings (``method: cpo`` only); None: the defaults."""
    kto: KTOSection | None = None
    """KTO's settings (``method: kto`` only); None: the defaults."""
    reward: RewardSection | None = None
    """A reward model's settings (``method: reward`` only); None: the defaults."""
    rloo: RLOOSection | None = None
    """RLOO's settings (``method: rloo`` only)."""
    ppo: PPOSection | None = None
    """PPO's settings (``method: ppo`` only)."""
    online_dpo: OnlineDPOSection | None = None
    """Online DPO's settings (``method: online_dpo`` only)."""
    distill: DistillSection | None = None
    """On-policy distillation's settings (``method: distill`` only); None: the defaults."""
    model_card: ModelCardSection = Field(default_factory=ModelCardSection)
    """What the ``README.md`` model card of every export says."""

    @model_validator(mode="before")
    @classmethod
    def _recipe_class(cls, raw: object) -> object:
        return resolve_recipe_keys(raw)

    @model_validator(mode="after")
    def _keys_used_by_method(self) -> RunConfig:
        lines = refusals(self, self.method) + optimizer_key_refusals(self.optim)
        if lines:
            raise ValueError("; ".join(lines))
        return self
