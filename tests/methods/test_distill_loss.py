"""The generalized JSD equals TRL's ``GKDTrainer.generalized_jsd_loss`` on the same logits and labels (within 1e-6):
forward KL (β 0), reverse KL (β 1) and between, with temperature, label masking and every reduction."""

from __future__ import annotations

import pytest
import torch

from honing.losses import IGNORE_INDEX
from honing.methods.distill_loss import generalized_jsd_loss, per_token_generalized_jsd

GKDTrainer = pytest.importorskip("trl.experimental.gkd").GKDTrainer


def logits_and_labels(seed: int = 0, rows: int = 3, width: int = 7, vocab: int = 11):
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(rows, width, vocab, generator=generator, dtype=torch.float64) * 2
    teacher = torch.randn(rows, width, vocab, generator=generator, dtype=torch.float64) * 2
    labels = torch.randint(0, vocab, (rows, width), generator=generator)
    labels[:, :2] = IGNORE_INDEX  # a prompt
    labels[1, 5:] = IGNORE_INDEX  # padding
    return student, teacher, labels


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_equals_trls_generalized_jsd_loss(beta, temperature, reduction):
    student, teacher, labels = logits_and_labels(seed=int(beta * 10 + temperature * 3))
    for given in (labels, None):
        expected = GKDTrainer.generalized_jsd_loss(
            student, teacher, labels=given, beta=beta, temperature=temperature, reduction=reduction
        )
        ours = generalized_jsd_loss(student, teacher, given, beta=beta, temperature=temperature, reduction=reduction)
        assert ours.shape == expected.shape
        assert torch.allclose(ours, expected, atol=1e-6, rtol=0), (beta, temperature, reduction, given is None)


def test_float32_logits_and_gradients_match_trl():
    student, teacher, labels = logits_and_labels(seed=3, vocab=50)
    ours_in = student.float().requires_grad_(True)
    trl_in = student.float().requires_grad_(True)
    ours = generalized_jsd_loss(ours_in, teacher.float(), labels, beta=0.5)
    expected = GKDTrainer.generalized_jsd_loss(trl_in, teacher.float(), labels=labels, beta=0.5)
    ours.backward()
    expected.backward()
    assert abs(ours.item() - expected.item()) < 1e-6
    assert torch.allclose(ours_in.grad, trl_in.grad, atol=1e-6)


def test_the_ends_are_the_two_kls_and_equal_distributions_give_zero():
    student, teacher, _ = logits_and_labels(seed=5)
    p_teacher, p_student = teacher.softmax(-1), student.softmax(-1)
    forward_kl = (p_teacher * (p_teacher.log() - p_student.log())).sum(-1)
    reverse_kl = (p_student * (p_student.log() - p_teacher.log())).sum(-1)
    assert torch.allclose(per_token_generalized_jsd(student, teacher, beta=0.0), forward_kl, atol=1e-12)
    assert torch.allclose(per_token_generalized_jsd(student, teacher, beta=1.0), reverse_kl, atol=1e-12)
    middle = per_token_generalized_jsd(student, teacher, beta=0.5)
    assert (middle > 0).all() and (middle <= torch.log(torch.tensor(2.0))).all()  # the JSD is bounded by log 2
    assert per_token_generalized_jsd(student, student, beta=0.5).abs().max() < 1e-12


def test_a_batch_without_kept_positions_gives_zero_not_nan():
    student, teacher, labels = logits_and_labels()
    labels[:] = IGNORE_INDEX
    assert generalized_jsd_loss(student, teacher, labels).item() == 0.0


def test_unknown_reduction_is_refused():
    student, teacher, labels = logits_and_labels()
    with pytest.raises(ValueError, match="reduction must be one of"):
        generalized_jsd_loss(student, teacher, labels, reduction="avg")
