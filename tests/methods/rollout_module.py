"""The rollout train modules as the tests build them: a section made of the test's keys, parts that score nothing
the tests do not hand them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from honing.config.grpo_schema import GRPOSection
from honing.config.rloo_schema import RLOOSection
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_settings import RolloutParts
from honing.methods.rloo import RLOOTrainModule
from honing.rl.rewards import RewardScorer


def rollout_module(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    cls: type[GRPOTrainModule] = GRPOTrainModule,
    *,
    micro_batch_size: int,
    reference_model: torch.nn.Module | None = None,
    chunked_loss: bool = True,
    **section: Any,
) -> GRPOTrainModule:
    """``cls`` over ``model`` with its section (``grpo``, or ``rloo`` for RLOO) made of ``section``'s keys; no KL,
    no samples and pad id 0 unless the keys say otherwise."""
    section_class = RLOOSection if issubclass(cls, RLOOTrainModule) else GRPOSection
    section.setdefault("beta", 0.0)  # RLOO's section defaults to TRL's 0.05
    section.setdefault("sample_interval", None)
    parts = RolloutParts(
        tokenizer=SimpleNamespace(pad_token_id=0),
        scorer=RewardScorer([("soft_10tokens_completions", 1.0)]),
        stop_token_ids=[1],
        reference_model=reference_model,
    )
    return cls(
        model,
        optimizer,
        section_class(**section),
        parts,
        micro_batch_size=micro_batch_size,
        chunked_loss=chunked_loss,
    )
