"""The generalized Jensen-Shannon divergence of on-policy distillation (GKD, Agarwal et al. 2024, eq. 1), as TRL's
``GKDTrainer.generalized_jsd_loss`` computes it: pure functions over logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from honing.losses import IGNORE_INDEX

#: the reductions TRL's ``generalized_jsd_loss`` takes
REDUCTIONS = ("batchmean", "sum", "mean", "none")


def per_token_generalized_jsd(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, beta: float = 0.5, temperature: float = 1.0
) -> torch.Tensor:
    """The divergence at each position ``[..., vocab] → [...]``: β·KL(teacher ‖ m) + (1 − β)·KL(student ‖ m) with
    m = β·teacher + (1 − β)·student; β = 0 is KL(teacher ‖ student), β = 1 is KL(student ‖ teacher)."""
    return elementwise_generalized_jsd(student_logits, teacher_logits, beta=beta, temperature=temperature).sum(-1)


def generalized_jsd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    beta: float = 0.5,
    temperature: float = 1.0,
    reduction: str = "batchmean",
) -> torch.Tensor:
    """TRL's ``generalized_jsd_loss``: the divergence over the positions whose label is not ignored (every position
    when ``labels`` is None), reduced as ``batchmean`` (sum / counted positions; with no labels, / the first
    dimension), ``sum``, ``mean`` (over the kept positions' vocabulary entries, as TRL's elementwise tensor) or
    ``none`` (``[positions, vocab]`` elementwise, TRL's shape)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if labels is not None:
        mask = labels != IGNORE_INDEX
        student_logits, teacher_logits = student_logits[mask], teacher_logits[mask]
    if reduction in ("mean", "none"):  # TRL keeps the vocabulary dimension for these two
        elementwise = elementwise_generalized_jsd(student_logits, teacher_logits, beta=beta, temperature=temperature)
        return elementwise.mean() if reduction == "mean" else elementwise
    total = per_token_generalized_jsd(student_logits, teacher_logits, beta=beta, temperature=temperature).sum()
    if reduction == "sum":
        return total
    # the kept positions with labels; without, TRL divides by the first dimension (the batch's rows)
    return total / max(student_logits.shape[0], 1)


def elementwise_generalized_jsd(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, beta: float = 0.5, temperature: float = 1.0
) -> torch.Tensor:
    """The divergence's terms ``[..., vocab]`` (their vocabulary sum is :func:`per_token_generalized_jsd`)."""
    student = F.log_softmax(student_logits / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits / temperature, dim=-1)
    # F.kl_div(input, target) is KL(target ‖ input): the reverse of the paper's argument order
    if beta == 0:
        return F.kl_div(student, teacher, reduction="none", log_target=True)
    if beta == 1:
        return F.kl_div(teacher, student, reduction="none", log_target=True)
    weight = torch.tensor(beta, dtype=student.dtype, device=student.device)
    mixture = torch.logsumexp(torch.stack([student + torch.log1p(-weight), teacher + torch.log(weight)]), dim=0)
    kl_teacher = F.kl_div(mixture, teacher, reduction="none", log_target=True)
    kl_student = F.kl_div(mixture, student, reduction="none", log_target=True)
    return weight * kl_teacher + (1 - weight) * kl_student
