"""Config sections for judging and describing a trained model: lm-evaluation-harness during training
(``callbacks.harness_eval``) and the model card written with every export (``model_card``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from honing.config.section import Section


class HarnessEvalSection(Section):
    """lm-evaluation-harness tasks on the current weights every ``interval`` steps (None: only at the end) and at
    the end, on rank 0 while the other ranks wait without a collective; ``eval/harness/<task>/<metric>`` in the
    trackers and ``SAVE_FOLDER/eval/harness/<task>.json``. Needs ``pip install 'honing[eval]'``."""

    enabled: bool = False
    """Run the lm-evaluation-harness tasks during training."""
    tasks: list[str] = Field(default_factory=list)
    """lm-eval task names or task YAML files."""
    include: list[str] = Field(default_factory=list)
    """Folders of task YAML files."""
    interval: int | None = Field(default=None, ge=1)
    """Evaluate every N steps; None: only at the end of training."""
    limit: float | None = Field(default=None, gt=0)
    """Examples per task (a fraction of them when < 1); None: all."""
    num_fewshot: int | None = Field(default=None, ge=0)
    """Few-shot examples in each prompt; None: each task's own."""
    batch_size: int = Field(default=8, ge=1)
    """Requests per forward pass."""
    max_new_tokens: int | None = Field(default=None, ge=1)
    """Generation tasks' answer length in tokens; None: the task's own."""
    apply_chat_template: bool | None = None
    """Wrap each request in the tokenizer's chat template; None: when the tokenizer has one."""

    @model_validator(mode="after")
    def _tasks_when_enabled(self) -> HarnessEvalSection:
        if self.enabled and not self.tasks:
            raise ValueError("callbacks.harness_eval.tasks: give at least one task name or task YAML file")
        return self


class ModelCardSection(Section):
    """What the ``README.md`` model card of every export (``hf/``, ``best/``, merged) says beyond the run's facts."""

    license: str | None = None
    """A Hub license id (apache-2.0, mit, llama3.1, other, ...); None: not stated."""
    language: list[str] = Field(default_factory=list)
    """The languages of the model, as ISO 639-1 codes, e.g. ``[en]``."""
    tags: list[str] = Field(default_factory=list)
    """Hub tags besides honing's own (honing, the method)."""
