"""The contract between the method-agnostic Trainer and a method's TrainModule."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)


class TrainModule:
    """Owns the model, optimizer, scheduler and loss; the Trainer only calls these methods.

    Subclasses set ``self.model`` and ``self.optimizer`` and implement ``train_batch``
    and ``eval_batch``. The state-dict methods below work for plain, DDP and FSDP2 models
    because they go through ``torch.distributed.checkpoint.state_dict``.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    trainer: Any = None  # set by the Trainer so that modules can record metrics

    def on_attach(self, trainer: Any) -> None:
        """Called once by the Trainer before training starts."""
        self.trainer = trainer

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Forward and backward over one global batch (split into micro-batches here)."""
        raise NotImplementedError

    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Return summed metrics for one batch, e.g. ``{"loss_sum": ..., "tokens": ...}``."""
        raise NotImplementedError

    def optim_step(self) -> None:
        """Clip gradients, step the optimizer and the LR schedule."""
        raise NotImplementedError

    def zero_grads(self) -> None:
        """Reset gradients before the next step."""
        self.optimizer.zero_grad(set_to_none=True)

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """Training FLOPs (forward + backward) per token, or None when unknown."""
        return None

    # --- checkpointing -------------------------------------------------------------
    def state_dict_to_save(self) -> dict[str, Any]:
        """Model and optimizer state in a form torch.distributed.checkpoint can write."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, **self.extra_state_dict()}

    def state_dict_to_load(self, load_optimizer_state: bool = True) -> dict[str, Any]:
        """A state dict of the right shapes for torch.distributed.checkpoint to load into."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        sd: dict[str, Any] = {"model": model_sd, **self.extra_state_dict()}
        if load_optimizer_state:
            sd["optim"] = optim_sd
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Put a loaded state dict back into the model, optimizer and extras."""
        if "optim" in state_dict:
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state_dict["model"],
                optim_state_dict=state_dict["optim"],
            )
        else:
            set_state_dict(
                self.model,
                [],
                model_state_dict=state_dict["model"],
                optim_state_dict={},
                options=StateDictOptions(strict=True),
            )
        self.load_extra_state_dict(state_dict)

    def extra_state_dict(self) -> dict[str, Any]:
        """Further state saved with the model (e.g. the LR scheduler); plain tensors and numbers."""
        return {}

    def load_extra_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``extra_state_dict`` returned."""
