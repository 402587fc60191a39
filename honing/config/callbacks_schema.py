"""The ``callbacks`` section of the run config: one section per built-in callback, and the user's own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from honing.config.evaluation import HarnessEvalSection
from honing.config.section import Section


class CheckpointerSection(Section):
    """When to save checkpoints and how many to keep."""

    save_interval: int = Field(default=1000, ge=1)
    """Save a checkpoint every N steps (and one at the end of training)."""
    ephemeral_save_interval: int | None = Field(default=None, ge=1)
    """Also a checkpoint every N steps that is deleted once a later one is complete (to resume from); None: none."""
    keep_last: int | None = Field(default=None, ge=1)
    """Keep the newest N permanent checkpoints, deleting older ones; None: keep them all."""
    async_save: bool = True
    """Write checkpoints in the background while training goes on."""
    save_at_epoch_end: bool = False
    """Also a checkpoint at each epoch's last step (Oumi's ``training.save_epoch``)."""


class EvaluatorSection(Section):
    """Validation loss (GRPO: the held-out prompts' rewards) every ``interval`` steps over at most ``max_batches``
    batches."""

    enabled: bool = True
    """Evaluate on the validation data when there is some: its loss (GRPO: its prompts sampled and scored)."""
    interval: int = Field(default=100, ge=1)
    """Evaluate every N steps (and at the end of training)."""
    interval_fraction: float | None = Field(default=None, gt=0, lt=1)
    """Evaluate every ``ceil(fraction x the run's steps)`` steps instead of ``interval``, resolved once the run's
    steps are known (transformers' ``eval_steps`` below 1, e.g. 0.05 for 20 evaluations); None: ``interval``."""
    every_epoch: bool = False
    """Evaluate at each epoch's last step instead of every ``interval`` steps (transformers' ``eval_strategy:
    epoch``); the end of training is evaluated either way."""
    before_training: bool = False
    """Also evaluate once before the first step, logged at step 0: where the run starts from (transformers'
    ``eval_on_start``; a resumed run has its evaluations already)."""
    max_batches: int | None = Field(default=None, ge=1)
    """Evaluate on at most N batches (per validation source); None: the whole validation set."""
    batch_size: int | None = Field(default=None, ge=1)
    """Rows per evaluation batch; None: the micro-batch size."""
    metric_for_best_model: str | None = None
    """The metric that picks the best checkpoint, e.g. ``eval/loss``; it is kept and exported to ``best/``. None: no
    best model."""
    load_best_model_at_end: bool = False
    """``hf/`` is the best checkpoint's model (by ``metric_for_best_model``, default ``eval/loss``), not the last step's
    (olmOCR / Hugging Face)."""
    greater_is_better: bool | None = None
    """Whether a higher metric is better; None: false for names with "loss" or "perplexity", else true."""


class ConsoleSection(Section):
    """The live progress display (rich on a terminal, plain lines otherwise)."""

    enabled: bool = True
    """Show training progress on rank 0."""
    log_interval: int | None = Field(default=None, ge=1)
    """Plain mode: a line every N steps; None: every ``trainer.metrics_collect_interval`` steps."""
    plain: bool | None = None
    """Plain log lines (true) or a live bar (false); None: plain unless the output is a terminal."""


class SpeedMonitorSection(Section):
    """Throughput and MFU; ``peak_flops`` overrides the device's known or probed peak."""

    enabled: bool = True
    """Log throughput (tokens/s) and MFU."""
    peak_flops: float | None = Field(default=None, gt=0)
    """The device's peak FLOP/s, for MFU; None: the device's known peak, or one measured on it."""


class GarbageCollectorSection(Section):
    """Python's automatic GC off, a collection every ``interval`` steps."""

    enabled: bool = True
    """Turn Python's automatic garbage collection off and collect on a schedule instead."""
    interval: int = Field(default=100, ge=1)
    """Collect garbage every N steps."""


class LossSpikeSection(Section):
    """Log ``train/loss_spike_score`` (the loss's z-score against its moving mean and std) and
    ``train/nonfinite_count``; warn when the score passes ``warn_score``."""

    enabled: bool = True
    """Log the loss spike score and the count of non-finite losses."""
    window: int = Field(default=100, ge=1)
    """The moving statistics' span in steps."""
    warmup_steps: int = Field(default=10, ge=0)
    """The score is 0 until this many losses are seen."""
    warn_score: float | None = Field(default=6.0, gt=0)
    """Warn when the score passes this; None: never warn."""


class LossWatchdogSection(Section):
    """Stop the run when ``train/loss`` stays above ``threshold`` for ``patience`` consecutive steps (axolotl's
    ``loss_watchdog_threshold`` / ``loss_watchdog_patience``); it ends as at its duration, checkpoint and exports
    written."""

    threshold: float | None = None
    """The loss above which a step counts against the run; None: no watchdog."""
    patience: int = Field(default=3, ge=1)
    """How many consecutive steps above ``threshold`` stop the run (axolotl's default 3)."""


class SampleSection(Section):
    """Text generated from fixed prompts every ``interval`` steps (null: only at the end) and at the
    end of training; written to samples.jsonl, the console and the trackers (a W&B table)."""

    enabled: bool = True
    """Generate text from ``prompts`` during and at the end of training."""
    prompts: list[str] = Field(default_factory=lambda: ["def "])
    """The prompts to continue."""
    interval: int | None = Field(default=None, ge=1)
    """Generate every N steps; None: only at the end of training."""
    max_new_tokens: int = Field(default=64, ge=1)
    """The length of each sample, in tokens."""
    temperature: float = Field(default=0.8, ge=0)
    """The sampling temperature; 0: greedy."""


class GenerationEvalSection(Section):
    """Exact-match accuracy of greedy answers to held-out prompts (the validation conversations'
    last assistant turn), before training, every ``interval`` steps and at the end."""

    enabled: bool = False
    """Score greedy answers to held-out prompts."""
    num_prompts: int = Field(default=50, ge=1)
    """How many held-out prompts are answered."""
    max_new_tokens: int = Field(default=32, ge=1)
    """The longest answer, in tokens."""
    interval: int | None = Field(default=None, ge=1)
    """Evaluate every N steps; None: only before training and at the end."""
    metrics: list[str] | None = None
    """``eval/<name>`` each: ``exact_match``, ``cer``, a reward's name (``honing.rl``: gsm8k, math_verify, ...) or
    ``pkg.mod:fn``; None: exact_match (and cer for vl_sft and grpo)."""


class WandbSection(Section):
    """Weights & Biases logging into ``SAVE_FOLDER/wandb/`` (rank 0; a failure warns and training goes on)."""

    enabled: bool = False
    """Log metrics, samples and the config to Weights & Biases."""
    project: str | None = None
    """The W&B project; None: W&B's default."""
    entity: str | None = None
    """The W&B team or user; None: W&B's default."""
    name: str | None = None
    """The W&B run's name; None: the run's ``run_name``."""
    tags: list[str] = Field(default_factory=list)
    """Tags of the W&B run."""
    group: str | None = None
    """The W&B group the run belongs to; None: none."""
    mode: Literal["online", "offline", "disabled"] | None = None
    """``online``, ``offline`` or ``disabled``; None: ``WANDB_MODE``, else online."""
    api_key: str | None = None
    """The W&B API key; None: ``WANDB_API_KEY`` (never saved or sent as config)."""


class TensorBoardSection(Section):
    """TensorBoard scalars in ``SAVE_FOLDER/tensorboard/`` (rank 0; a failure warns and training goes on)."""

    enabled: bool = False
    """Write TensorBoard scalars."""


class ProfilerSection(Section):
    """A ``torch.profiler`` trace of steps ``start`` to ``stop`` (inclusive) in ``SAVE_FOLDER/profiler/``."""

    enabled: bool = False
    """Record a ``torch.profiler`` trace."""
    start: int = Field(default=5, ge=1)
    """The first step traced."""
    stop: int = Field(default=6, ge=1)
    """The last step traced."""

    @model_validator(mode="after")
    def _start_before_stop(self) -> ProfilerSection:
        if self.stop < self.start:
            raise ValueError(f"stop ({self.stop}) must be >= start ({self.start}): steps start..stop are profiled")
        return self


class UploadSection(Section):
    """Copy every checkpoint, and the final ``hf/`` and ``best/`` exports, to ``save_path``: a local
    folder or an ``s3://`` (any fsspec) URL; in the background, each folder marked complete last."""

    enabled: bool = True
    """Copy checkpoints and exports to ``save_path`` (when it is set)."""
    save_path: str | None = None
    """A local folder or an ``s3://`` (any fsspec) URL to copy to; None: no copies."""


class HubSection(Section):
    """Push the run's final export (and, by ``strategy``, its checkpoints) to a Hugging Face Hub model repository,
    from rank 0 with ``huggingface_hub``'s ``upload_folder`` (transformers' ``push_to_hub``); the token is
    ``HF_TOKEN``'s or the saved login's, never a key of the config."""

    repo_id: str | None = None
    """The model repository, ``owner/name`` (a bare name: under the token's own account); None: no push."""
    strategy: Literal["end", "checkpoint", "all_checkpoints"] = "end"
    """``end``: the final export at the end; ``checkpoint``: also each checkpoint to ``last-checkpoint/`` (replaced
    each time, to resume from); ``all_checkpoints``: also each checkpoint to its own ``stepN/``."""
    folder: Literal["hf", "adapter"] = "hf"
    """The export pushed to the repository's root: ``hf`` (the model, merged when LoRA) or ``adapter`` (LoRA only)."""
    private: bool = False
    """Create the repository private (an existing one keeps its visibility)."""
    revision: str | None = None
    """The branch to push to; None: the default branch."""


class CustomCallbackSection(Section):
    """A user callback loaded by import path ``package.module:ClassName``."""

    import_path: str
    """The callback class, as ``package.module:ClassName``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments the class is built with."""

    @field_validator("import_path")
    @classmethod
    def _has_colon(cls, value: str) -> str:
        if ":" not in value:
            raise ValueError(f"expected 'package.module:ClassName', got {value!r}")
        return value


class CallbacksSection(Section):
    """Built-in callbacks and user callbacks."""

    checkpointer: CheckpointerSection = Field(default_factory=CheckpointerSection)
    """When checkpoints are saved and how many are kept."""
    evaluator: EvaluatorSection = Field(default_factory=EvaluatorSection)
    """The validation loss during training."""
    console: ConsoleSection = Field(default_factory=ConsoleSection)
    """The progress display."""
    speed_monitor: SpeedMonitorSection = Field(default_factory=SpeedMonitorSection)
    """Throughput and MFU."""
    garbage_collector: GarbageCollectorSection = Field(default_factory=GarbageCollectorSection)
    """Python's garbage collection on a schedule."""
    loss_spike: LossSpikeSection = Field(default_factory=LossSpikeSection)
    """The loss spike score and warnings."""
    loss_watchdog: LossWatchdogSection = Field(default_factory=LossWatchdogSection)
    """Stop a run whose loss stays above a threshold."""
    sample: SampleSection = Field(default_factory=SampleSection)
    """Text generated from fixed prompts."""
    generation_eval: GenerationEvalSection = Field(default_factory=GenerationEvalSection)
    """Greedy answers to held-out prompts, scored."""
    harness_eval: HarnessEvalSection = Field(default_factory=HarnessEvalSection)
    """lm-evaluation-harness tasks during training."""
    wandb: WandbSection = Field(default_factory=WandbSection)
    """Weights & Biases logging."""
    tensorboard: TensorBoardSection = Field(default_factory=TensorBoardSection)
    """TensorBoard logging."""
    profiler: ProfilerSection = Field(default_factory=ProfilerSection)
    """A torch.profiler trace of a few steps."""
    upload: UploadSection = Field(default_factory=UploadSection)
    """Copies of checkpoints and exports to another folder or bucket."""
    hub: HubSection = Field(default_factory=HubSection)
    """Pushes of the final export (and checkpoints) to the Hugging Face Hub."""
    custom: list[CustomCallbackSection] = Field(default_factory=list)
    """Your own callbacks, by import path."""
