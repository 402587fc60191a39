"""Every DPO loss type, f-divergence, MPO's weighted list, LD-DPO and WPO against TRL's own
``DPOTrainer._compute_loss`` on the same per-token log-probs: the loss (relative to it where above 1) and its
gradient to 1e-6 in float32, through honing's loss part as the pair step uses it (``DPOLoss.with_targets``,
``terms``, the mean over pairs plus the NLL weight times the token-mean NLL)."""

from __future__ import annotations

import re
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from honing.dpo_losses import DPO_LOSS_TYPES, F_DIVERGENCE_LOSS_TYPES, F_DIVERGENCES, dpo_loss, f_divergence_scores
from honing.losses import IGNORE_INDEX
from honing.methods.pair_losses import DPOLoss

PAIRS, POSITIONS = 6, 9
#: the settings TRL needs for a loss type to be valid (label smoothing for robust, EXO and AOT)
SMOOTHING = {"robust": 0.2, "exo_pair": 1e-3, "aot": 0.1, "aot_unpaired": 0.1}


class FakeModel(torch.nn.Module):
    """Stands in for the model TRL's ``_compute_loss`` calls: the per-token log-probs it is given (0 where a position
    predicts no completion token, as TRL's fused head returns them), and WPO's log Σ p²."""

    is_gradient_checkpointing = False

    def __init__(self, log_probs: torch.Tensor, shift_mask: torch.Tensor, log_sum_sq_probs: torch.Tensor):
        super().__init__()
        self.log_probs, self.shift_mask, self.log_sum_sq_probs = log_probs, shift_mask, log_sum_sq_probs

    def forward(self, **_):
        zeros = torch.zeros_like(self.log_probs)
        return SimpleNamespace(
            log_probs=self.log_probs * self.shift_mask,
            entropy=zeros,
            mean_logits=zeros,
            is_top1=zeros.bool(),
            log_sum_sq_probs=self.log_sum_sq_probs,
        )


def sample(seed: int = 0):
    """Per-token log-probs of the policy and a reference near it for PAIRS pairs (rows: chosen then rejected, TRL's
    layout), replies of 1 to 8 tokens after a prompt of 1 or 2, and per-token log Σ p² below 0."""
    generator = torch.Generator().manual_seed(seed)
    completion_mask = torch.zeros(2 * PAIRS, POSITIONS + 1, dtype=torch.long)
    for row in range(2 * PAIRS):
        prompt = int(torch.randint(1, 3, (1,), generator=generator))
        length = int(torch.randint(1, POSITIONS + 1 - prompt, (1,), generator=generator))
        completion_mask[row, prompt : prompt + length] = 1
    policy = -3 * torch.rand(2 * PAIRS, POSITIONS, generator=generator)
    reference = policy + 0.3 * torch.randn(policy.shape, generator=generator)
    square = -2 * torch.rand(policy.shape, generator=generator)
    return policy, reference, square, completion_mask


def trl_loss(policy, reference, square, completion_mask, settings):
    """TRL's ``DPOTrainer._compute_loss`` (with a reference model) on a stand-in trainer."""
    from trl import DPOTrainer

    shift_mask = completion_mask[:, 1:]
    stand_in = SimpleNamespace(
        model=FakeModel(policy, shift_mask, square),
        ref_model=FakeModel(reference, shift_mask, square),
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda v: v, gather=lambda v: v),
        args=SimpleNamespace(gradient_checkpointing_kwargs=None, discopop_tau=settings.get("discopop_tau", 0.05)),
        beta=settings.get("beta", 0.1),
        loss_types=list(settings["loss_types"]),
        loss_weights=list(settings.get("loss_weights") or [1.0] * len(settings["loss_types"])),
        ld_alpha=settings.get("ld_alpha"),
        f_divergence_type=settings.get("f_divergence_type", "reverse_kl"),
        f_alpha_divergence_coef=settings.get("f_alpha_divergence_coef", 0.5),
        label_smoothing=settings.get("label_smoothing", 0.0),
        use_weighting=settings.get("use_weighting", False),
        precompute_ref_logps=False,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {
        "input_ids": torch.ones_like(completion_mask),
        "attention_mask": torch.ones_like(completion_mask),
        "completion_mask": completion_mask,
    }
    return DPOTrainer._compute_loss(stand_in, stand_in.model, inputs, return_outputs=False)


def honing_loss(policy, reference, square, completion_mask, settings):
    """honing's ``DPOLoss`` as the pair step runs it on one micro-batch: each target column's per-token log-probs
    summed, the mean pair loss plus ``nll_weight`` × the chosen replies' token-mean NLL."""
    loss = DPOLoss(
        beta=settings.get("beta", 0.1),
        loss_type=tuple(settings["loss_types"]),
        loss_weights=settings.get("loss_weights"),
        label_smoothing=settings.get("label_smoothing", 0.0),
        f_divergence_type=settings.get("f_divergence_type", "reverse_kl"),
        f_alpha_divergence_coef=settings.get("f_alpha_divergence_coef", 0.5),
        discopop_tau=settings.get("discopop_tau", 0.05),
        ld_alpha=settings.get("ld_alpha"),
        use_weighting=settings.get("use_weighting", False),
    )
    chosen_mask, rejected_mask = completion_mask[:, 1:].bool().chunk(2)
    # one pair's replies as two target columns along the same positions (each column's tokens in order)
    targets = (
        torch.stack([chosen_mask, rejected_mask], -1)
        .long()
        .masked_fill(~torch.stack([chosen_mask, rejected_mask], -1), IGNORE_INDEX)
    )
    columns = loss.with_targets({"targets": targets})["targets"] != IGNORE_INDEX

    def sums(per_token: torch.Tensor) -> torch.Tensor:  # column by column, in TRL's summation order
        halves = per_token.chunk(2)
        return torch.stack([(halves[k % 2] * columns[..., k]).sum(1) for k in range(columns.shape[-1])], 1)

    logps, lengths = sums(policy), columns.sum(1)
    ref = loss.sequence_logps(sums(reference)).unbind(1)
    terms = loss.terms(logps, lengths, ref, square_sums=sums(square)[:, :2])
    nll = -logps[:, 0].sum() / lengths[:, 0].sum()
    return terms["losses"].mean() + loss.nll_weight * nll


def differences(settings, seed: int = 0) -> tuple[float, float]:
    """The difference between TRL's and honing's loss relative to the loss (at least 1: losses of 10 to 50, as
    sppo_hard's and ipo's, differ by their float32 spacing, 2e-6 to 4e-6), and the largest difference between their
    gradients by the policy's per-token log-probs."""
    policy, reference, square, completion_mask = sample(seed)
    values, grads = [], []
    for compute in (trl_loss, honing_loss):
        leaf = policy.clone().requires_grad_(True)
        value = compute(leaf, reference, square, completion_mask, settings)
        value.backward()
        values.append(value.detach())
        grads.append(leaf.grad)
    assert grads[0].abs().max() > 0, "the loss moves the policy"
    scale = max(1.0, values[0].abs().item())
    return (values[0] - values[1]).abs().item() / scale, (grads[0] - grads[1]).abs().max().item()


PAIR_TYPES = [name for name in DPO_LOSS_TYPES if name != "sft"]
CASES = (
    [{"loss_types": [name], "label_smoothing": SMOOTHING.get(name, 0.0)} for name in DPO_LOSS_TYPES]
    + [
        {"loss_types": [name], "label_smoothing": SMOOTHING.get(name, 0.0), "f_divergence_type": divergence}
        for divergence in F_DIVERGENCES[1:]
        for name in F_DIVERGENCE_LOSS_TYPES
    ]
    + [
        {"loss_types": ["sigmoid"], "f_divergence_type": "alpha_divergence", "f_alpha_divergence_coef": 0.3},
        {"loss_types": ["discopop"], "discopop_tau": 0.2, "beta": 0.5},
        {"loss_types": ["sigmoid", "bco_pair", "sft"], "loss_weights": [0.8, 0.2, 1.0]},  # MPO
        {"loss_types": ["ipo", "apo_down", "aot"], "loss_weights": [0.5, 2.0, 0.3], "label_smoothing": 0.1},
        {"loss_types": ["sigmoid"], "ld_alpha": 0.5},
        {"loss_types": ["ipo", "sft"], "ld_alpha": 0.0, "loss_weights": [1.0, 0.5]},
        {"loss_types": ["apo_zero", "nca_pair"], "ld_alpha": 0.7},
        {"loss_types": ["sigmoid"], "use_weighting": True},
        # not hinge: TRL's in-place WPO product on relu's output breaks its own backward
        {"loss_types": ["robust", "ipo"], "use_weighting": True, "label_smoothing": 0.2, "ld_alpha": 0.3},
        {"loss_types": ["sigmoid_norm", "exo_pair"], "use_weighting": True, "f_divergence_type": "js_divergence",
         "label_smoothing": 1e-3, "ld_alpha": 0.5, "loss_weights": [0.4, 0.6]},
    ]
)  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("settings", CASES, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_loss_and_gradient_equal_trls(settings, seed):
    loss_difference, grad_difference = differences(settings, seed)
    assert loss_difference < 1e-6 and grad_difference < 1e-6, (loss_difference, grad_difference)


def test_every_trl_loss_type_is_covered():
    """honing lists exactly the loss types the installed TRL's DPOConfig names (its help text lists them)."""
    from trl import DPOConfig

    help_text = DPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    assert set(DPO_LOSS_TYPES) == set(re.findall(r"`'(\w+)'`", help_text))


def test_alpha_divergence_at_one_is_the_log_ratio_and_forward_kl_by_hand():
    ratios = torch.tensor([0.5, -1.0])
    torch.testing.assert_close(f_divergence_scores(ratios, "alpha_divergence", 1.0), ratios)
    # forward KL: f'(t) = 1 − 1/t; t = e^0.5 and e^-1
    expected = torch.tensor([1 - torch.e**-0.5, 1 - torch.e])
    torch.testing.assert_close(f_divergence_scores(ratios, "forward_kl"), expected)


def test_refusals_name_the_setting():
    pair = [torch.tensor([-1.0])] * 4
    with pytest.raises(ValueError, match="exo_pair loss needs 0 < label_smoothing"):
        dpo_loss(*pair, loss_type="exo_pair")
    with pytest.raises(ValueError, match="works with"):
        dpo_loss(*pair, loss_type="bco_pair", f_divergence_type="forward_kl")
    with pytest.raises(ValueError, match="not a pair loss"):
        dpo_loss(*pair, loss_type="sft")
