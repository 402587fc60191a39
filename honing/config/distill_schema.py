"""The ``distill`` section: on-policy distillation from a frozen teacher (``method: distill``), under the names of
TRL's GKDConfig (and Oumi's ``training.gkd``). Defaults are TRL's."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from honing.config.section import Section


class DistillSection(Section):
    """On-policy distillation (``method: distill``, TRL's GKD): the student is trained towards a frozen teacher's
    next-token distributions with the generalized Jensen-Shannon divergence, on the dataset's completions or, with
    probability ``lmbda`` per step, on completions the student samples itself. The teacher must share the student's
    tokenizer (GOLD's cross-tokenizer alignment is not built)."""

    teacher_model_name_or_path: str | None = None
    """The teacher: a Hugging Face causal LM by hub name or local folder (an export, ``SAVE_FOLDER/hf``); None: a
    frozen copy of the student as built (self-distillation)."""
    teacher_model_init_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the teacher's ``from_pretrained`` (e.g. ``dtype: bfloat16``, ``attn_implementation``);
    ``dtype`` defaults to the student's."""
    lmbda: float = Field(default=0.5, ge=0, le=1)
    """The probability that a step trains on completions the student samples (on-policy) instead of the dataset's;
    drawn from (seed, step), so a resumed run makes the same choices."""
    beta: float = Field(default=0.5, ge=0, le=1)
    """The generalized JSD's interpolation: 0 is the forward KL(teacher ‖ student), 1 the reverse KL(student ‖
    teacher), values between the divergence to their β-mixture."""
    temperature: float = Field(default=0.9, gt=0)
    """The sampling temperature of on-policy (and ``seq_kd``) completions; the divergence itself is taken at
    temperature 1, as TRL's GKDTrainer does."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Sampling keeps the smallest set of tokens whose probabilities reach top_p (1: all)."""
    top_k: int = Field(default=0, ge=0)
    """Sampling keeps the k most likely tokens (0: all)."""
    max_new_tokens: int = Field(default=128, gt=0)
    """The longest sampled completion, in tokens (cut further to fit ``data.seq_len`` with its prompt)."""
    seq_kd: bool = False
    """Sequence-level KD: a step that is not on-policy trains on completions the teacher samples instead of the
    dataset's."""
