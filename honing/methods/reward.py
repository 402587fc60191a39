"""The reward model's pair step: each pair's chosen and rejected sequence scored by the one-label head in one forward
(the pair row and its batching are DPO's), trained with ``honing.methods.reward_loss.RewardLoss``; TRL's
RewardTrainer's metric names (``accuracy``, ``margin``, ``mean_reward``)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from honing.losses import IGNORE_INDEX
from honing.methods.pairs import PairTrainModule
from honing.models.score_head import position_scores
from honing.models.wrappers import transformers_model

#: per-pair sums a step or evaluation adds up (means over pairs once divided by the pairs), TRL's names
REWARD_SUMS = ("loss_sum", "accuracy", "margin", "mean_reward", "rewards/chosen", "rewards/rejected")


class RewardTrainModule(PairTrainModule):
    """The pair step with sequence rewards in place of log-probs: the mean over the step's pairs of the loss part's
    per-pair loss (``loss``: a ``RewardLoss``), whatever the split of the step into ranks and micro-batches."""

    def pair_terms(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-pair losses and rewards of one micro-batch (one forward for chosen and rejected)."""
        rewards = pair_rewards(
            self.model, micro, self.collator, autocast=self.autocast, packed=self.packed_pairs
        ).float()
        terms = self.loss.terms(rewards, None, None, margins=micro.get("margin"))
        zero = rewards.new_zeros(())
        terms.update(
            chosen_nll=zero,
            chosen_tokens=zero,
            real=(micro["targets"][..., 0] != IGNORE_INDEX).any(1).to(rewards.dtype),  # a filler pair scores nothing
        )
        return terms

    def pair_sums(self, terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The micro-batch's sums over its real pairs of the loss and of each of TRL's metrics."""
        real = terms["real"] > 0

        def total(values: torch.Tensor) -> torch.Tensor:
            return torch.where(real, values, 0.0).sum()

        chosen, rejected = terms["chosen_rewards"], terms["rejected_rewards"]
        return {
            "loss_sum": total(terms["losses"].detach()),
            "accuracy": total((chosen > rejected).to(terms["real"].dtype)),
            "margin": total(chosen - rejected),
            "mean_reward": total((chosen + rejected) / 2),
            "rewards/chosen": total(chosen),
            "rewards/rejected": total(rejected),
        }

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The mean over pairs of the loss and of each metric (``eval/accuracy``: held-out pair accuracy)."""
        pairs = max(totals["pairs"], 1.0)
        return {"loss" if key == "loss_sum" else key: totals[key] / pairs for key in REWARD_SUMS}


def sequence_ends(micro: dict[str, torch.Tensor], pad_token_id: int | None) -> torch.Tensor:
    """(rows, 2): the position in each pair row of the chosen and of the rejected sequence's last token that is not
    the pad token, the token transformers' sequence classifier scores (its last token without a pad token id)."""
    input_ids, segments = micro["input_ids"], micro["segments"].to(micro["input_ids"].device)
    index = torch.arange(input_ids.shape[1], device=input_ids.device)
    prompt, chosen, rejected = (segments[:, i : i + 1] for i in range(3))
    in_chosen = index < prompt + chosen
    in_rejected = (index < prompt) | ((index >= prompt + chosen) & (index < prompt + chosen + rejected))
    kept = input_ids != pad_token_id if pad_token_id is not None else torch.ones_like(in_chosen)
    # the rightmost such position, as transformers finds it: argmax of index × mask
    return torch.stack([(index * (kept & span)).argmax(-1) for span in (in_chosen, in_rejected)], dim=1)


def pair_rewards(
    model: torch.nn.Module,
    micro: dict[str, torch.Tensor],
    collator: Any,
    *,
    autocast: Any = contextlib.nullcontext,
    packed: bool = False,
) -> torch.Tensor:
    """(rows, 2): the score head's reward of each pair's chosen and rejected sequence, from one forward of the pair
    rows (``packed``: their real tokens in one row, under the pair attention)."""
    inputs = collator.packed_model_inputs(micro) if packed else collator.model_inputs(micro)

    def run_forward() -> Any:
        with autocast():
            return model(**inputs, use_cache=False)

    scores = position_scores(model, run_forward)
    if packed:
        scores = collator.unpack(micro, scores[..., None])[..., 0]
    ends = sequence_ends(micro, transformers_model(model).config.pad_token_id)
    return scores.gather(1, ends)
