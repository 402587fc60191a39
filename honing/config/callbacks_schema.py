"""The ``callbacks`` section of the run config: one section per built-in callback, and the user's own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from honing.config.evaluation import HarnessEvalSection
from honing.config.section import Section


class CheckpointerSection(Section):
    """When to save checkpoints and how many to keep."""

    save_interval: int = Field(default=1000, ge=1)
    ephemeral_save_interval: int | None = Field(default=None, ge=1)
    keep_last: int | None = Field(default=None, ge=1)
    async_save: bool = True
    save_at_epoch_end: bool = False  # also a checkpoint at each epoch's last step (Oumi's training.save_epoch)


class EvaluatorSection(Section):
    """Validation loss every ``interval`` steps over at most ``max_batches`` batches."""

    enabled: bool = True
    interval: int = Field(default=100, ge=1)
    max_batches: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)
    metric_for_best_model: str | None = None  # e.g. eval/loss; the best checkpoint is kept and exported
    # hf/ is the best checkpoint's model (metric_for_best_model, default eval/loss), not the last step's (olmOCR / HF)
    load_best_model_at_end: bool = False
    greater_is_better: bool | None = None  # None: False for names with "loss" or "perplexity"


class ConsoleSection(Section):
    """The live progress display (rich on a terminal, plain lines otherwise)."""

    enabled: bool = True
    log_interval: int | None = Field(default=None, ge=1)
    plain: bool | None = None


class SpeedMonitorSection(Section):
    """Throughput and MFU; ``peak_flops`` overrides the device's known or probed peak."""

    enabled: bool = True
    peak_flops: float | None = Field(default=None, gt=0)


class GarbageCollectorSection(Section):
    """Python's automatic GC off, a collection every ``interval`` steps."""

    enabled: bool = True
    interval: int = Field(default=100, ge=1)


class LossSpikeSection(Section):
    """Log ``train/loss_spike_score`` (the loss's z-score against its moving mean and std) and
    ``train/nonfinite_count``; warn when the score passes ``warn_score``."""

    enabled: bool = True
    window: int = Field(default=100, ge=1)  # the moving statistics' span in steps
    warmup_steps: int = Field(default=10, ge=0)  # the score is 0 until this many losses are seen
    warn_score: float | None = Field(default=6.0, gt=0)  # None: never warn


class SampleSection(Section):
    """Text generated from fixed prompts every ``interval`` steps (null: only at the end) and at the
    end of training; written to samples.jsonl, the console and the trackers (a W&B table)."""

    enabled: bool = True
    prompts: list[str] = Field(default_factory=lambda: ["def "])
    interval: int | None = Field(default=None, ge=1)
    max_new_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.8, ge=0)


class GenerationEvalSection(Section):
    """Exact-match accuracy of greedy answers to held-out prompts (the validation conversations'
    last assistant turn), before training, every ``interval`` steps and at the end."""

    enabled: bool = False
    num_prompts: int = Field(default=50, ge=1)
    max_new_tokens: int = Field(default=32, ge=1)
    interval: int | None = Field(default=None, ge=1)
    # eval/<name> each: exact_match, cer, a reward's name (honing.rl: gsm8k, math_verify, ...) or "pkg.mod:fn";
    # None: exact_match (and cer for vl_sft and grpo)
    metrics: list[str] | None = None


class WandbSection(Section):
    """Weights & Biases logging into ``SAVE_FOLDER/wandb/`` (rank 0; a failure warns and training goes on)."""

    enabled: bool = False
    project: str | None = None
    entity: str | None = None
    name: str | None = None  # None: the run's run_name
    tags: list[str] = Field(default_factory=list)
    group: str | None = None
    mode: Literal["online", "offline", "disabled"] | None = None  # None: WANDB_MODE, else online
    api_key: str | None = None  # None: WANDB_API_KEY; never saved or sent as config


class TensorBoardSection(Section):
    """TensorBoard scalars in ``SAVE_FOLDER/tensorboard/`` (rank 0; a failure warns and training goes on)."""

    enabled: bool = False


class ProfilerSection(Section):
    """A ``torch.profiler`` trace of steps ``start`` to ``stop`` (inclusive) in ``SAVE_FOLDER/profiler/``."""

    enabled: bool = False
    start: int = Field(default=5, ge=1)
    stop: int = Field(default=6, ge=1)

    @model_validator(mode="after")
    def _start_before_stop(self) -> ProfilerSection:
        if self.stop < self.start:
            raise ValueError(f"stop ({self.stop}) must be >= start ({self.start}): steps start..stop are profiled")
        return self


class UploadSection(Section):
    """Copy every checkpoint, and the final ``hf/`` and ``best/`` exports, to ``save_path``: a local
    folder or an ``s3://`` (any fsspec) URL; in the background, each folder marked complete last."""

    enabled: bool = True
    save_path: str | None = None  # None: no copies


class CustomCallbackSection(Section):
    """A user callback loaded by import path ``package.module:ClassName``."""

    import_path: str
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("import_path")
    @classmethod
    def _has_colon(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError(f"expected 'package.module:ClassName', got {value!r}")
        return value


class CallbacksSection(Section):
    """Built-in callbacks and user callbacks."""

    checkpointer: CheckpointerSection = Field(default_factory=CheckpointerSection)
    evaluator: EvaluatorSection = Field(default_factory=EvaluatorSection)
    console: ConsoleSection = Field(default_factory=ConsoleSection)
    speed_monitor: SpeedMonitorSection = Field(default_factory=SpeedMonitorSection)
    garbage_collector: GarbageCollectorSection = Field(default_factory=GarbageCollectorSection)
    loss_spike: LossSpikeSection = Field(default_factory=LossSpikeSection)
    sample: SampleSection = Field(default_factory=SampleSection)
    generation_eval: GenerationEvalSection = Field(default_factory=GenerationEvalSection)
    harness_eval: HarnessEvalSection = Field(default_factory=HarnessEvalSection)
    wandb: WandbSection = Field(default_factory=WandbSection)
    tensorboard: TensorBoardSection = Field(default_factory=TensorBoardSection)
    profiler: ProfilerSection = Field(default_factory=ProfilerSection)
    upload: UploadSection = Field(default_factory=UploadSection)
    custom: list[CustomCallbackSection] = Field(default_factory=list)
