"""``grpo.validation``: how GRPO's held-out prompts are answered at an evaluation (verl's ``val_kwargs``)."""

from __future__ import annotations

from pydantic import Field

from honing.config.section import Section


class GRPOValidationSection(Section):
    """How the ``data.validation`` prompts are answered every ``callbacks.evaluator.interval`` steps, before their
    completions are scored by ``grpo.rewards`` (``eval/reward``, ``eval/rewards/<name>/mean``). Defaults are verl's
    ``val_kwargs``: one greedy completion per prompt."""

    num_generations: int = Field(default=1, ge=1)
    """Completions per held-out prompt (verl's ``val_kwargs.n``)."""
    temperature: float = Field(default=0.0, ge=0)
    """Their sampling temperature; 0: greedy (verl's ``val_kwargs.do_sample: false``)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of held-out completions (1: off)."""
    top_k: int = Field(default=0, ge=0)
    """Top-k sampling of held-out completions (0: no top-k filtering)."""
    min_p: float | None = Field(default=None, ge=0, le=1)
    """Min-p sampling of held-out completions (as the section's ``min_p``); None: off."""
    repetition_penalty: float = Field(default=1.0, gt=0)
    """The repetition penalty of held-out completions (as the section's ``repetition_penalty``); 1: off."""
    before_training: bool = False
    """Also answer and score them once before the first step, logged at step 0 (verl's ``val_before_train``)."""
