"""GRPO's step metrics, computed stacked and read in one host copy (``LossStats``, ``RolloutMetrics``), are the same
bits as each metric computed on its own by its definition (TRL's): the values of the one-by-one code they replaced."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from honing.losses import combine_rewards, nanstd
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_metrics import RolloutMetrics, ended_rows
from honing.methods.grpo_policy_loss import PolicyLoss

STOP = [2]


def recorder() -> tuple[SimpleNamespace, dict[str, float]]:
    """A trainer whose ``record_metric`` keeps each value as the metrics buffer hands it on (a float64)."""
    logged: dict[str, float] = {}

    def record_metric(name, value, reduce_type=None):
        logged[name] = value.double().item() if isinstance(value, torch.Tensor) else float(value)

    return SimpleNamespace(record_metric=record_metric), logged


def metrics(names=("a", "b")) -> RolloutMetrics:
    scorer = SimpleNamespace(names=list(names), weights=torch.tensor([1.0, 0.5]))
    ranks = SimpleNamespace(sum=lambda value: value)  # one process
    cpu = torch.device("cpu")
    return RolloutMetrics(ranks=ranks, device=cpu, scorer=scorer, stop_token_ids=STOP, sample_interval=0)


def micro_batches(sequence_level: bool, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Two micro-batches of ragged completions whose ratios clip on both sides, with a KL and a soft metric."""
    generator = torch.Generator().manual_seed(seed)
    parts = []
    for lengths in ([5, 1, 3, 5], [2, 5, 4, 3]):
        mask = (torch.arange(5) < torch.tensor(lengths).unsqueeze(1)).long()
        width = 1 if sequence_level else 5
        ratio = 1 + 0.4 * torch.randn(4, width, generator=generator)
        advantages = torch.randn(4, generator=generator)
        kl = torch.rand(4, 5, generator=generator) * 0.1
        metric = torch.rand(4, width, generator=generator)
        parts.append(dict(mask=mask, ratio=ratio, advantages=advantages, kl=kl, metric=metric))
    return parts


def one_by_one_loss_metrics(parts, loss: PolicyLoss) -> dict[str, float]:
    """Each metric by its own sums and division, summed from zero per micro-batch (the code before the stacking)."""
    totals, low_seq, high_seq, metric = [torch.zeros(()) for _ in range(6)], [], [], [torch.zeros(())] * 2
    for part in parts:
        mask, ratio, advantages = part["mask"].float(), part["ratio"], part["advantages"].unsqueeze(1)
        values = part["metric"].float()
        if values.shape[-1] == mask.shape[-1]:
            metric = [metric[0] + (values * mask).sum(), metric[1] + mask.sum()]
        else:
            metric = [metric[0] + values.sum(), metric[1] + torch.tensor(float(values.shape[0]))]
        low = ((ratio < 1 - loss.epsilon) & (advantages < 0)).float()
        high = ((ratio > 1 + loss.upper_epsilon) & (advantages > 0)).float()
        region = ((low + high) > 0).float()
        units = mask if ratio.shape[-1] == mask.shape[-1] else (mask.sum(-1, keepdim=True) > 0).float()
        sums = [mask.sum(), (part["kl"] * mask).sum(), (low * units).sum(), (high * units).sum()]
        sums += [(region * units).sum(), units.sum()]
        totals = [total + value for total, value in zip(totals, sums)]
        low_seq.append((low * units).sum(-1) / units.sum(-1))
        high_seq.append((high * units).sum(-1) / units.sum(-1))
    units = totals[5].clamp(min=1)
    values = {"kl": totals[1] / totals[0].clamp(min=1), "cispo_clip_ratio": metric[0] / metric[1].clamp(min=1)}
    values.update({"clip_ratio/low_mean": totals[2] / units, "clip_ratio/high_mean": totals[3] / units})
    values.update({"clip_ratio/region_mean": totals[4] / units, "clip_ratio/low_min": torch.cat(low_seq).min()})
    values["clip_ratio/high_max"] = torch.cat(high_seq).max()
    return {f"train/{name}": value.double().item() for name, value in values.items()}


@pytest.mark.parametrize("sequence_level", [False, True])
@pytest.mark.parametrize("loss_type", ["dapo", "cispo"])
def test_loss_metrics_equal_one_by_one(sequence_level, loss_type):
    loss = PolicyLoss(loss_type=loss_type, beta=0.04, epsilon=0.2, epsilon_high=0.28)
    parts = micro_batches(sequence_level)
    stats = LossStats()
    for part in parts:
        stats.add(part["mask"], part["ratio"], part["advantages"], part["kl"], 0.2, 0.28, part["metric"])
    trainer, logged = recorder()
    metrics().loss_stats(trainer, stats, loss, kl_in_loss=True)
    expected = one_by_one_loss_metrics(parts, loss)
    names = ["train/kl"] + (
        ["train/cispo_clip_ratio"] if loss_type == "cispo" else [n for n in expected if "/clip_ratio/" in n]
    )
    assert logged == {name: expected[name] for name in names}  # the same bits, the same names
    assert 0 < logged["train/kl"] and (loss_type == "cispo" or logged["train/clip_ratio/region_mean"] > 0)


def test_rollout_metrics_equal_one_by_one():
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor([6, 1, 4, 6, 2, 5, 6, 3])
    mask = (torch.arange(6) < lengths.unsqueeze(1)).long()
    ids = torch.randint(3, 60, (8, 6), generator=generator) * mask
    ids[[1, 4, 7], lengths[[1, 4, 7]] - 1] = STOP[0]  # three completions end; the rest ran out of tokens
    rewards_per_func = torch.rand(8, 2, generator=generator)
    rewards_per_func[2, 1] = float("nan")  # a reward that does not apply to one completion
    std = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3])
    trainer, logged = recorder()
    metrics().rollouts(trainer, ids, mask, mask, rewards_per_func, std)

    ended = ended_rows(ids, mask, STOP)
    real = mask.sum(1).float()
    rewards = combine_rewards(rewards_per_func, torch.tensor([1.0, 0.5]))
    expected = {
        "completions/mean_length": real.mean(),
        "completions/min_length": real.min(),
        "completions/max_length": real.max(),
        "completions/clipped_ratio": (~ended).float().mean(),
        "completions/mean_terminated_length": real[ended].mean(),
        "completions/min_terminated_length": real[ended].min(),
        "completions/max_terminated_length": real[ended].max(),
        "rewards/a/mean": torch.nanmean(rewards_per_func[:, 0]),
        "rewards/a/std": nanstd(rewards_per_func[:, 0]),
        "rewards/b/mean": torch.nanmean(rewards_per_func[:, 1]),
        "rewards/b/std": nanstd(rewards_per_func[:, 1]),
        "reward": torch.nanmean(rewards),
        "reward_std": nanstd(rewards),
        "frac_reward_zero_std": torch.isclose(std, torch.zeros_like(std)).float().mean(),
    }
    assert logged == {f"train/{name}": value.double().item() for name, value in expected.items()}
    assert logged["train/completions/clipped_ratio"] == 5 / 8 and logged["train/frac_reward_zero_std"] == 0.5


def test_loss_stats_stay_on_the_loss_device():
    """The sums stay where the loss is (no host copy a micro-batch), and an absent soft metric sits beside them, so
    the step's one ``torch.cat`` of both works on an accelerator too (``meta`` stands in for one here)."""
    part = micro_batches(sequence_level=False)[0]
    meta = {key: value.to("meta") for key, value in part.items()}
    stats = LossStats()
    stats.add(meta["mask"], meta["ratio"], meta["advantages"], None, 0.2, 0.28)
    assert stats.sums().device.type == "meta" and stats.metric.device.type == "meta"
    assert torch.cat([stats.sums(), stats.metric]).shape == (8,)
