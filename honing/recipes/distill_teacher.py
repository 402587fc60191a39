"""The teacher of on-policy distillation: a frozen model loaded from ``distill.teacher_model_name_or_path`` (or a
frozen copy of the student, as DPO's ``reference: copy``), refused in one line when its tokenizer is not the
student's: the divergence compares two distributions over one vocabulary, and GOLD's cross-tokenizer alignment is
not built."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from honing.errors import ConfigError
from honing.models import unwrap_model
from honing.models.loading import load_pretrained_model
from honing.recipes.reference_parts import build_reference_model, frozen_parallel
from honing.run.parts import Placement

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config import RunConfig
    from honing.config.distill_schema import DistillSection
    from honing.models.builder import ModelBuilder

log = logging.getLogger(__name__)

#: the keys of ``distill.teacher_model_init_kwargs`` that reach ``from_pretrained`` (TRL's ``torch_dtype`` too)
INIT_KWARGS = ("dtype", "torch_dtype", "attn_implementation", "trust_remote_code")


def build_teacher(
    model: torch.nn.Module,
    section: DistillSection,
    config: RunConfig,
    tokenizer: PreTrainedTokenizerBase,
    models: ModelBuilder,
    placement: Placement,
) -> torch.nn.Module:
    """The frozen teacher on the run's device (sharded like the student under FSDP2), its tokenizer and vocabulary
    checked against the student's (``tokenizer``; ``models``: the student's dtype and attention kernel)."""
    path = section.teacher_model_name_or_path
    if path is None:
        return build_reference_model(model, "copy", config, placement)
    check_same_tokenizer(path, tokenizer, student_name(config))
    options = teacher_load_options(section.teacher_model_init_kwargs, models)
    teacher = load_pretrained_model(path, **options)
    teacher_rows = teacher.get_output_embeddings().weight.shape[0]
    student_rows = unwrap_model(model).get_output_embeddings().weight.shape[0]
    if teacher_rows != student_rows:
        raise ConfigError(
            tokenizer_refusal(path, student_name(config), f"{teacher_rows} logits per token against {student_rows}")
        )
    teacher = teacher.to(placement.device).eval().requires_grad_(False)
    return frozen_parallel(teacher, config, placement)


def check_same_tokenizer(path: str, tokenizer: PreTrainedTokenizerBase, student: str) -> None:
    """Refuse a teacher whose tokenizer maps any text to other ids than the student's (its vocabulary, token →
    id, differs); a teacher folder without a tokenizer is checked by its logits' width alone."""
    from transformers import AutoTokenizer

    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        log.warning(
            "distill: the teacher %s has no tokenizer to compare (%s); only its vocabulary size is", path, error
        )
        return
    theirs, ours = teacher_tokenizer.get_vocab(), tokenizer.get_vocab()
    if theirs != ours:
        differ = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda item: item[1])
        shown = ", ".join(repr(token) for token, _ in differ[:3])
        raise ConfigError(
            tokenizer_refusal(path, student, f"{len(theirs)} tokens against {len(ours)}, differing at {shown}")
        )


def tokenizer_refusal(teacher: str, student: str, why: str) -> str:
    """The one line refusing a teacher of another tokenizer."""
    return (
        f"distill.teacher_model_name_or_path: the teacher {teacher!r} and the student {student} have different "
        f"tokenizers ({why}); distillation compares their next-token distributions over one vocabulary, and GOLD's "
        "cross-tokenizer alignment is not built in honing: use a teacher with the student's tokenizer"
    )


def student_name(config: RunConfig) -> str:
    """The student as the user named it."""
    name = config.model.name_or_path
    return repr(name) if name else "(built from model.config)"


def teacher_load_options(kwargs: dict[str, Any], models: ModelBuilder) -> dict[str, Any]:
    """``load_pretrained_model``'s arguments from ``distill.teacher_model_init_kwargs``: dtype (names as in TRL,
    ``auto``: the checkpoint's own; default the student's), attention kernel (default the student's), remote code."""
    unknown = sorted(set(kwargs) - set(INIT_KWARGS))
    if unknown:
        raise ConfigError(
            f"distill.teacher_model_init_kwargs: {', '.join(unknown)} not available; expected any of: "
            + ", ".join(INIT_KWARGS)
        )
    dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
    if dtype is None:
        dtype = models.dtype()
    elif dtype != "auto":
        if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
            raise ConfigError(f"distill.teacher_model_init_kwargs.dtype: {dtype!r} is not a torch dtype name")
        dtype = getattr(torch, str(dtype))
    return {
        "dtype": dtype,
        "attn_implementation": kwargs.get("attn_implementation", models.attention_name()),
        "trust_remote_code": bool(kwargs.get("trust_remote_code", False)),
    }
