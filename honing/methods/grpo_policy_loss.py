"""GRPO's per-token loss for every ``loss_type`` and ratio level, as TRL's GRPOTrainer._compute_loss computes it: the
clipped surrogate (``honing.losses``, GSPO's sequence ratio in ``grpo_estimators``) or one of the soft losses
(``grpo_soft_losses``), the KL term, and the policy mask of ``top_entropy_quantile``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from honing.losses import (
    CLIPPED_LOSS_TYPES,
    GRPO_LOSS_TYPES,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    grpo_per_token_loss,
)
from honing.methods.grpo_soft_losses import soft_per_token_loss

#: the metric each soft loss type records (TRL's names) in place of the clip ratios
LOSS_METRICS = {"cispo": "cispo_clip_ratio", "vespo": "vespo/phi_seq_mean"}


@dataclass(frozen=True)
class PolicyLoss:
    """The loss keys of a ``grpo`` section, and the per-token loss they define (TRL's names and defaults)."""

    loss_type: str = "dapo"
    importance_sampling_level: str = "token"
    epsilon: float = 0.2
    epsilon_high: float | None = None
    delta: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"
    use_bias_correction_kl: bool = True
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    def __post_init__(self) -> None:
        if self.loss_type not in GRPO_LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {self.loss_type!r}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}")
        if self.importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
            raise ValueError(
                f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, "
                f"got {self.importance_sampling_level!r}"
            )

    @property
    def upper_epsilon(self) -> float:
        """ε_high, or ε when it is not set."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def clips(self) -> bool:
        """Whether the ratio is clipped PPO's way (the clip-ratio metrics apply)."""
        return self.loss_type in CLIPPED_LOSS_TYPES

    def per_token(
        self,
        logps: torch.Tensor,
        old_logps: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        ref_logps: torch.Tensor | None = None,
        policy_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(per-token loss, ratio, per-token KL, the soft loss's own metric or None)``."""
        kl_options = dict(ref_logps=ref_logps, beta=self.beta, kl_estimator=self.kl_estimator)
        kl_options.update(use_bias_correction_kl=self.use_bias_correction_kl, policy_mask=policy_mask)
        level = self.importance_sampling_level
        if not self.clips:
            vespo = dict(k_pos=self.vespo_k_pos, lambda_pos=self.vespo_lambda_pos)
            vespo.update(k_neg=self.vespo_k_neg, lambda_neg=self.vespo_lambda_neg)
            return soft_per_token_loss(
                self.loss_type,
                logps,
                old_logps,
                advantages,
                mask,
                level=level,
                epsilon_high=self.upper_epsilon,
                sapo_temperature_pos=self.sapo_temperature_pos,
                sapo_temperature_neg=self.sapo_temperature_neg,
                vespo=vespo,
                **kl_options,
            )
        clip = dict(epsilon=self.epsilon, epsilon_high=self.upper_epsilon, delta=self.delta)
        loss, ratio, kl = grpo_per_token_loss(
            logps, old_logps, advantages, mask=mask, level=level, **clip, **kl_options
        )
        return loss, ratio, kl, None
