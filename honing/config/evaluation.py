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
    tasks: list[str] = Field(default_factory=list)  # lm-eval task names or task YAML files
    include: list[str] = Field(default_factory=list)  # folders of task YAML files
    interval: int | None = Field(default=None, ge=1)
    limit: float | None = Field(default=None, gt=0)  # examples per task (a fraction when < 1); None: all
    num_fewshot: int | None = Field(default=None, ge=0)  # None: each task's own
    batch_size: int = Field(default=8, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=1)  # generation tasks' answer length; None: the task's
    apply_chat_template: bool | None = None  # None: when the tokenizer has a chat template

    @model_validator(mode="after")
    def _tasks_when_enabled(self) -> HarnessEvalSection:
        if self.enabled and not self.tasks:
            raise ValueError("callbacks.harness_eval.tasks: give at least one task name or task YAML file")
        return self


class ModelCardSection(Section):
    """What the ``README.md`` model card of every export (``hf/``, ``best/``, merged) says beyond the run's facts."""

    license: str | None = None  # a Hub license id (apache-2.0, mit, llama3.1, other, ...); None: not stated
    language: list[str] = Field(default_factory=list)  # ISO 639-1 codes, e.g. [en]
    tags: list[str] = Field(default_factory=list)  # besides honing's own (honing, the method)
