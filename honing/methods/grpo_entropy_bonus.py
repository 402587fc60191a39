"""GRPO's entropy bonus (TRL's ``entropy_coef``; ``use_adaptive_entropy``: Skywork-OR1's adaptive control):
``L = L_policy − coef · H``, H the mean token entropy of each micro-batch over the tokens the policy loss trains,
divided by the micro-batches of the optimizer step (TRL's gradient accumulation), never by the loss type's own
normaliser, so ``coef`` means the same for every loss type (``GRPOTrainer._compute_loss``).

Adaptive: the coefficient applied in an optimizer step is the one left by the previous step, and only while the
previous step's entropy over every rank was at or below ``target``; after each step that entropy (a token-weighted
mean over the step's micro-batches and ranks) moves the coefficient by ``delta`` toward more bonus below the target
and less above it, within [``coef_min``, ``coef_max``]. The coefficient and that entropy are checkpointed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from honing.config.grpo_schema import GRPOSection


@dataclass
class EntropyBonus:
    """The bonus's coefficient and, when adaptive, its controller's state."""

    coef: float
    adaptive: bool = False
    coef_min: float = 0.0
    coef_max: float = 1.0
    delta: float = 0.005
    target: float = 0.2
    last_world_entropy: float = math.inf  # TRL's start: no bonus applied before the first step's entropy is known
    window: torch.Tensor | None = None  # the step's (entropy sum, token count) so far on this rank

    def applied_coef(self) -> float:
        """The coefficient this optimizer step applies (the previous step's, gated by its entropy when adaptive)."""
        if self.adaptive:
            return self.coef if self.last_world_entropy <= self.target else 0.0
        return self.coef

    def term(self, entropies: torch.Tensor, mask: torch.Tensor, micro_batches: int) -> torch.Tensor:
        """``coef · H / micro_batches`` for one micro-batch (``entropies`` carry the gradient); its entropy is added
        to the step's window when adaptive."""
        weights = mask.to(entropies.dtype)
        mean = (entropies * weights).sum() / weights.sum().clamp(min=1.0)
        if self.adaptive:
            stats = torch.stack([(entropies.detach() * weights).sum(), weights.sum()]).float()
            self.window = stats if self.window is None else self.window + stats
        return self.applied_coef() * mean / micro_batches

    def end_step(self, sum_over_ranks: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """After an optimizer step: the step's entropy over every rank moves the adaptive coefficient."""
        if not self.adaptive or self.window is None:
            return
        total = sum_over_ranks(self.window)
        world_entropy = float(total[0] / total[1].clamp(min=1.0))
        if world_entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_world_entropy = world_entropy
        self.window = None

    def state_dict(self) -> dict[str, float]:
        """The controller's state, as TRL's ``entropy_ctrl_state.json`` holds it."""
        return {"entropy_coef": self.coef, "last_world_entropy": self.last_world_entropy}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore ``state_dict``'s values."""
        self.coef, self.last_world_entropy = float(state["entropy_coef"]), float(state["last_world_entropy"])
        self.window = None


def entropy_bonus(section: GRPOSection) -> EntropyBonus | None:
    """The bonus ``grpo.entropy_coef`` / ``use_adaptive_entropy`` ask for; None when neither does (TRL's)."""
    bonus = EntropyBonus(
        section.entropy_coef,
        section.use_adaptive_entropy,
        section.entropy_coef_min,
        section.entropy_coef_max,
        section.entropy_coef_delta,
        section.entropy_target,
    )
    return bonus if bonus.coef != 0.0 or bonus.adaptive else None
