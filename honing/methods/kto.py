"""KTO's TrainModule: the pair step's forward and reference (``honing.methods.pairs``) over rows of
``prompt | completion | mismatched completion`` with a desirable / undesirable label, trained with
``honing.methods.kto_loss``; TRL's metric names."""

from __future__ import annotations

from typing import Any

import torch

from honing.losses import IGNORE_INDEX
from honing.methods.kto_loss import KTOLoss, kl_estimate, kl_sums
from honing.methods.pairs import PairTrainModule
from honing.train.metrics import ReduceType

#: per-row sums every step or evaluation adds up; each metric is a sum over the rows of one label, over their count
LABELLED_SUMS = ("rewards/chosen", "logps/chosen", "rewards/rejected", "logps/rejected")


class KTOTrainModule(PairTrainModule):
    """The mean over the step's rows of the KTO loss against ``reference``; the KL estimate is taken over each
    micro-batch's mismatched completions on every rank (TRL's: over each forward's batch, gathered over
    processes), without gradient."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, loss: KTOLoss, **options: Any):
        super().__init__(model, optimizer, loss=loss, **options)

    def kto_terms(self, micro: dict[str, torch.Tensor], *, over_ranks: bool) -> dict[str, torch.Tensor]:
        """Per-row losses, rewards and log-probs of one micro-batch (the completion and the mismatched one in one
        forward), its rows' labels, which rows are real, and the KL estimate it used."""
        logps, lengths, _ = self.score_pairs(self.model, micro)
        reference = self.reference_logps(micro)
        real = lengths[:, 0] > 0  # a filler row scores nothing
        kl = logps.new_zeros(())
        if self.loss.uses_kl:
            sums = kl_sums(logps[:, 1].detach(), reference[1], real)
            kl = kl_estimate(self.ranks.sum(sums) if over_ranks else sums)
        desirable = micro["desirable"].to(torch.bool) & real
        terms = self.loss.row_terms(logps, reference, desirable, kl)
        terms.update(desirable=desirable, undesirable=~micro["desirable"].to(torch.bool) & real, real=real, kl=kl)
        return terms

    def kto_sums(self, terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The micro-batch's sums over its real rows: the loss, and each label's rewards and log-probs."""

        def total(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            return torch.where(rows, values, 0.0).sum()

        chosen, rejected = terms["desirable"], terms["undesirable"]
        return {
            "loss_sum": total(terms["losses"].detach(), terms["real"]),
            "rewards/chosen": total(terms["rewards"], chosen),
            "logps/chosen": total(terms["logps"].detach(), chosen),
            "rewards/rejected": total(terms["rewards"], rejected),
            "logps/rejected": total(terms["logps"].detach(), rejected),
        }

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes Σ row losses / (rows of the whole step, over all ranks)."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        local = torch.stack(
            [
                torch.tensor(sum(m["input_ids"].shape[0] for m in micro_batches), device=self.device),
                sum(scored_rows(m, m["desirable"].to(torch.bool)) for m in micro_batches),
            ]
        )
        step_rows, step_desirable = self.ranks.sum(local).unbind()
        scale = self.ranks.grad_divisor / step_rows.clamp(min=1)
        sums: dict[str, torch.Tensor] = {}
        kls: list[torch.Tensor] = []

        def loss_fn(micro: dict[str, torch.Tensor]) -> torch.Tensor:
            terms = self.kto_terms(micro, over_ranks=True)
            for key, value in self.kto_sums(terms).items():
                sums[key] = sums[key] + value if key in sums else value
            kls.append(terms["kl"])
            return terms["losses"].sum()

        loss_sum = self.backward_each(micro_batches, loss_fn, scale)
        self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run)
        if self.trainer is None or dry_run:
            return
        # each rank's share of a label's mean over the step (0 in a step without rows of that label)
        counts = {"chosen": step_desirable.clamp(min=1), "rejected": (step_rows - step_desirable).clamp(min=1)}
        means = {key: sums[key] * self.ranks.grad_divisor / counts[key.split("/")[1]] for key in LABELLED_SUMS}
        means["rewards/margins"] = means["rewards/chosen"] - means["rewards/rejected"]
        means["kl"] = torch.stack(kls).mean()  # the same on every rank
        for key, value in means.items():
            self.trainer.record_metric(f"train/{key}", value, ReduceType.mean)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Summed loss and metrics over the batch's rows, its rows of each label, the KL estimates weighted by their
        rows (each micro-batch's own: validation batches of ranks may differ in number of micro-batches), and the
        held-out preference pairs whose desirable reply gets the higher reward (TRL's DPO ``rewards/accuracies``)."""
        self.model.eval()
        totals: dict[str, torch.Tensor] = {}
        for micro in self.micro_batches(batch):
            terms = self.kto_terms(micro, over_ranks=False)
            sums = self.kto_sums(terms)
            rows = terms["real"].sum()
            sums.update(
                rows=rows, chosen=terms["desirable"].sum(), rejected=terms["undesirable"].sum(), kl=terms["kl"] * rows
            )
            right, pairs = pair_accuracy_sums(terms["rewards"], micro["pair"], terms["real"])
            sums.update(pairs_right=right, pairs=pairs)
            for key, value in sums.items():
                value = value.double()
                totals[key] = totals[key] + value if key in totals else value
        return totals

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The mean loss and KL over rows, each label's mean rewards and log-probs (TRL's names), and the share of
        held-out pairs ranked right (``rewards/accuracies``, where the validation rows hold pairs)."""
        rows = max(totals["rows"], 1.0)
        metrics = {"loss": totals["loss_sum"] / rows, "kl": totals["kl"] / rows}
        for key in LABELLED_SUMS:
            label = key.split("/")[1]
            if totals[label] > 0:
                metrics[key] = totals[key] / totals[label]
        if totals["chosen"] > 0 and totals["rejected"] > 0:
            metrics["rewards/margins"] = metrics["rewards/chosen"] - metrics["rewards/rejected"]
        if totals["pairs"] > 0:
            metrics["rewards/accuracies"] = totals["pairs_right"] / totals["pairs"]
        return metrics


def scored_rows(micro: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """How many of ``rows`` (a mask) score a completion (a filler row scores none)."""
    scored = (micro["targets"][..., 0] != IGNORE_INDEX).any(1)
    return (rows.to(scored.device) & scored).sum()


def pair_accuracy_sums(
    rewards: torch.Tensor, pair: torch.Tensor, real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Over the preference pairs whose two real rows sit side by side in the micro-batch (desirable first, the same
    ``pair`` id, not -1): how many have the desirable reward above the undesirable one, and how many there are."""
    pair = pair.to(rewards.device)
    matched = (pair[:-1] == pair[1:]) & (pair[:-1] >= 0) & real[:-1] & real[1:]
    right = matched & (rewards[:-1] > rewards[1:])
    return right.sum(), matched.sum()
