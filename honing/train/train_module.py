"""The contract between the method-agnostic Trainer and a method's TrainModule."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


class ModelState:
    """Model and optimizer state for checkpoints (``self.model``, ``self.optimizer`` set by a subclass):
    what the Checkpointer saves and loads. A TrainModule is one; so is a shell that only loads weights."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer

    def state_dict_to_save(self) -> dict[str, Any]:
        """Model and optimizer state in a form torch.distributed.checkpoint can write."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, **self.extra_state_dict()}

    def state_dict_to_load(self, load_optimizer_state: bool = True) -> dict[str, Any]:
        """A state dict of the right shapes for torch.distributed.checkpoint to load into."""
        if not load_optimizer_state:
            # get_state_dict would initialise an empty optimizer's state (a zero-lr step, its step count 1):
            # an optimizer that is not loaded must stay fresh
            return {"model": get_model_state_dict(self.model), **self.extra_state_dict()}
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, **self.extra_state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Put a loaded state dict back into the model, optimizer and extras. The optimizer's moments come from
        the checkpoint, its hyperparameters (``lr``, ``initial_lr``, ``weight_decay``, ``betas`` ...) stay this
        run's: a resumed run with ``optim.lr`` changed trains at the new LR from its first step."""
        if "optim" in state_dict:
            configured = configured_hyperparameters(self.optimizer)
            set_state_dict(
                self.model,
                self.optimizer,
                model_state_dict=state_dict["model"],
                optim_state_dict=state_dict["optim"],
            )
            restore_hyperparameters(self.optimizer, configured)
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


def configured_hyperparameters(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each parameter group's settings as this run built them: everything of the group but its parameters."""
    return [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]


def restore_hyperparameters(optimizer: torch.optim.Optimizer, configured: list[dict[str, Any]]) -> None:
    """Put back the settings ``configured_hyperparameters`` took before a checkpoint's optimizer state was loaded.

    ``Optimizer.load_state_dict`` replaces every group's settings with the saved ones, so a resumed run would train
    on at the checkpoint's LR, weight decay and betas whatever its config says. As OLMo-core keeps ``initial_lr`` a
    fixed field over loading, honing keeps all of them: the checkpoint gives the state (moments, step counts), the
    config the settings; the schedule then scales the configured ``initial_lr`` at the resumed step."""
    if len(configured) != len(optimizer.param_groups):  # the load itself refuses another layout; never half-apply
        raise ValueError(f"{len(optimizer.param_groups)} parameter groups after loading, {len(configured)} before")
    for group, settings in zip(optimizer.param_groups, configured, strict=True):
        group.update(settings)


class TrainModule(ModelState, ABC):
    """Owns the model, optimizer, scheduler and loss; the Trainer only calls these methods.

    Subclasses set ``self.model`` and ``self.optimizer`` and implement the four step methods and
    ``num_tokens``. ``honing.methods.base.BaseTrainModule`` implements the shared plumbing (micro-batches,
    autocast, gradient sync, clipping, LR schedule) so that a method's ``train_batch`` is only its maths.
    The state-dict methods below work for plain, DDP and FSDP2 models because they go through
    ``torch.distributed.checkpoint.state_dict``.
    """

    trainer: Trainer | None = None  # set by the Trainer so that modules can record metrics

    def on_attach(self, trainer: Trainer) -> None:
        """Called once by the Trainer before training starts."""
        self.trainer = trainer

    @abstractmethod
    def train_batch(self, batch: Any, dry_run: bool = False) -> None:
        """Forward and backward over this rank's part of one global batch, recording ``train/loss``."""

    @abstractmethod
    def eval_batch(self, batch: Any) -> dict[str, torch.Tensor]:
        """Summed totals for one validation batch (e.g. ``loss_sum`` and ``tokens``): sums, so the evaluator
        can add them over batches and ranks exactly before ``eval_metrics`` turns them into means."""

    @abstractmethod
    def optim_step(self) -> None:
        """Clip gradients, step the optimizer and the LR schedule."""

    @abstractmethod
    def zero_grads(self) -> None:
        """Reset gradients before the next step."""

    @abstractmethod
    def num_tokens(self, batch: Any) -> int:
        """Tokens, over all ranks, that this step's batch counts for (throughput and token durations); asked
        after ``train_batch``, so a method that generates (GRPO) can count what it generated."""

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """Evaluation metrics (names without the ``eval/`` prefix) from ``eval_batch``'s totals summed over
        every batch and rank; by default each total as it is."""
        return dict(totals)

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """Training FLOPs (forward + backward) per token, or None when unknown."""
        return None
