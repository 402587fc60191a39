"""PPO's value model beside the policy (TRL's: a sequence classifier with one label, its body run on the rollout
and its ``score`` head read at every position): its per-token values, its own optimizer stepped with the policy's,
and its state in the policy's checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from honing.distributed import is_distributed

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def token_values(
    model: torch.nn.Module, micro: dict[str, torch.Tensor], autocast: Callable[[], AbstractContextManager]
) -> torch.Tensor:
    """The value of each completion position of a rollout micro-batch (rows, completion length): the head on the
    hidden state before each completion token (TRL's ``full_value[:, context_length - 1 : -1]``), in float32."""
    width = micro["completion_ids"].shape[1]
    backbone = getattr(model, model.base_model_prefix)
    with autocast():
        hidden = backbone(
            input_ids=micro["input_ids"], attention_mask=micro["attention_mask"], use_cache=False
        ).last_hidden_state
        values = model.score(hidden[:, -width - 1 : -1])
    return values[..., 0].float()


def sequence_scores(
    model: torch.nn.Module, micro: dict[str, torch.Tensor], autocast: Callable[[], AbstractContextManager]
) -> torch.Tensor:
    """A reward model's score of each prompt and completion: its head at the completion's last token (TRL's
    ``get_reward``), in float32."""
    completion_mask = micro["completion_mask"]
    width = completion_mask.shape[1]
    last = micro["input_ids"].shape[1] - width + completion_mask.sum(1) - 1
    backbone = getattr(model, model.base_model_prefix)
    with torch.no_grad(), autocast():
        hidden = backbone(
            input_ids=micro["input_ids"], attention_mask=micro["attention_mask"], use_cache=False
        ).last_hidden_state
        picked = hidden[torch.arange(len(hidden), device=hidden.device), last.clamp(min=0)]
        return model.score(picked)[:, 0].float()


def unscored(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
    """The reward model's column among the reward functions: zeros, which the PPO step fills with its scores."""
    return [0.0] * len(completions)


class ValueModel:
    """The value model and its optimizer: gradients averaged over the data-parallel ranks (the policy's wrapper
    does its own; this one is plain), clipped to ``grad_clip``, stepped at the policy's learning-rate factor."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, grad_clip: float | None):
        self.model, self.optimizer, self.grad_clip = model, optimizer, grad_clip

    def zero_grad(self) -> None:
        """Reset the value model's gradients."""
        self.optimizer.zero_grad(set_to_none=True)

    def step(self, lr_factor: float, group: ProcessGroup | None = None) -> torch.Tensor:
        """Average the gradients over ``group``'s ranks, clip them, step at ``lr_factor`` × the configured LR; the
        gradient norm before clipping."""
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        if is_distributed():
            for param in params:
                torch.distributed.all_reduce(param.grad, op=torch.distributed.ReduceOp.AVG, group=group)
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        for g in self.optimizer.param_groups:
            g["lr"] = g["initial_lr"] * lr_factor
        self.optimizer.step()
        return norm

    def state_dict(self) -> dict[str, Any]:
        """The model's and optimizer's state as torch.distributed.checkpoint writes and loads it."""
        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what ``state_dict`` returned (the configured LR kept: the schedule sets it each step)."""
        configured = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        for g, settings in zip(self.optimizer.param_groups, configured, strict=True):
            g.update(settings)
