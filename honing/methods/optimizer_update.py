"""The optimizer's half of a step, after the backward passes: the non-finite-loss policy, fp16's loss scale,
clipping with the grad-norm metric, the LR schedule and the optimizer step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from honing.distributed import is_distributed
from honing.errors import ConfigError
from honing.methods.loss_scaling import LossScaler
from honing.models.parallel import clip_grads, grads_by_mesh, on_one_device, total_grad_norm
from honing.optim.schedulers import lr_factor
from honing.train.metrics import ReduceType
from honing.train.train_module import TrainModule

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


class OptimizerUpdate:
    """Steps one optimizer at the schedule's LR (``scheduler``: ``lr_factor``'s keywords), its gradients clipped to
    ``grad_clip`` (None: not clipped); ``loss_scaler``: fp16-mixed's (None otherwise); ``skip_nonfinite``: leave the
    weights as they are on a step whose loss is NaN / inf (the trainer section's policy, set when the module is
    attached; otherwise the Trainer stops the run before its next save)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        scheduler: dict[str, Any] | None = None,
        grad_clip: float | None = 1.0,
        loss_scaler: LossScaler | None = None,
        skip_nonfinite: bool = False,
    ):
        self.optimizer = optimizer
        self.scheduler = scheduler or {"name": "constant"}
        self.grad_clip = grad_clip
        self.loss_scaler = loss_scaler
        self.skip_nonfinite = skip_nonfinite
        self._params: list[torch.nn.Parameter] | None = None
        self._one_device = False  # whether they are plain tensors of one device and dtype (``on_one_device``)

    def backward_scale(self, scale: torch.Tensor | float) -> torch.Tensor | float:
        """What backward is called with for a loss weighted by ``scale``: ``scale``, times the loss scale under
        ``fp16-mixed`` (a loss that computes its gradients in the forward, the chunked head's, takes this too)."""
        return scale if self.loss_scaler is None else self.loss_scaler.scaled(scale)

    def lr_factor(self, trainer: Trainer | None, step: int | None = None) -> float:
        """The schedule's multiplier for the step ``trainer`` takes (or for ``step``); under ``fp16-mixed`` the
        schedule runs behind by the steps skipped for an overflow (as transformers' Trainer's)."""
        if step is None:
            step = trainer.global_step if trainer is not None else 1
        if self.loss_scaler is not None:
            step = max(step - self.loss_scaler.skipped_steps, 1)
        max_steps = trainer.max_steps if trainer is not None else None
        if max_steps is None and (
            self.scheduler.get("name", "constant") != "constant" or self.scheduler.get("warmup_ratio") is not None
        ):
            raise ConfigError(
                f"scheduler {self.scheduler['name']!r} (with its warmup_ratio, if any) needs the run's "
                "total number of steps, which this data loader cannot tell ahead of time; give "
                "trainer.max_duration in steps"
            )
        max_steps = max_steps or step
        return lr_factor(step, max_steps=max_steps, **self.scheduler)

    def skips(self, loss: torch.Tensor | None) -> bool:
        """Whether the ``skip`` policy leaves this step's weights as they are: its loss is not finite on some rank.
        The policy's price: one host sync a step. Gradients are reduced over ranks, so one rank's non-finite loss
        poisons every rank's update: all ranks skip together."""
        if not self.skip_nonfinite or loss is None:
            return False
        finite = torch.isfinite(loss).to(torch.int32).reshape(1)
        if is_distributed():
            finite = finite.cpu()
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        return not bool(finite.item())

    def clip_grad_norm(self, max_norm: float | None) -> torch.Tensor:
        """The total norm of the optimizer's gradients, of the whole model however its weights are split over
        ranks; the gradients are then clipped to ``max_norm`` (None: left as they are)."""
        if self._params is None:  # listing parameters every step costs more than clipping a small model
            self._params = [p for group in self.optimizer.param_groups for p in group["params"]]
            self._one_device = on_one_device(self._params)
        groups = grads_by_mesh(self._params)
        grad_norm = total_grad_norm(self._params, groups, one_device=self._one_device)
        if max_norm is not None:
            clip_grads(self._params, max_norm, grad_norm, groups, one_device=self._one_device)
        return grad_norm

    def step(self, module: TrainModule, loss: torch.Tensor | None) -> None:
        """Clip (and log) the gradient norm, set this step's LR, and step the optimizer; under the ``skip``
        policy a step whose ``loss`` is not finite leaves the weights and the optimizer state untouched. Under
        ``fp16-mixed`` the gradients are unscaled before clipping, and a step whose gradients overflowed is
        skipped (``optim/skipped_steps``) and the scale backed off (``optim/loss_scale``: the step's scale).
        Metrics go to ``module.trainer`` (none without one)."""
        trainer = module.trainer
        if self.skips(loss):
            self.optimizer.zero_grad(set_to_none=True)
            if trainer is not None:
                trainer.record_metric("optim/skipped_steps", 1, ReduceType.max)
            return
        scaler = self.loss_scaler
        if scaler is not None:
            if trainer is not None:
                trainer.record_metric("optim/loss_scale", scaler.scale(), ReduceType.max)
            scaler.unscale(self.optimizer)
        grad_norm = self.clip_grad_norm(self.grad_clip)
        factor = self.lr_factor(trainer)
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor
        if scaler is None:
            self.optimizer.step()
        elif not scaler.step(self.optimizer):
            self.optimizer.zero_grad(set_to_none=True)
            if trainer is not None:
                trainer.record_metric("optim/skipped_steps", 1, ReduceType.max)
            return
        if trainer is not None:
            # the norm is of the already-reduced gradients, the same on every rank
            trainer.record_metric("optim/grad_norm", grad_norm, ReduceType.max)
            trainer.record_metric("optim/lr", self.optimizer.param_groups[0]["lr"], ReduceType.max)


def unrecorded_optim_step(module: TrainModule) -> None:
    """``module``'s optimizer step between two of one batch's updates (GRPO's ``steps_per_generation``, PPO's
    mini-batches): its metrics are dropped, the loop's ``optim_step`` records the step's."""
    if module.trainer is None:
        module.optim_step()
        return
    trainer, module.trainer = module.trainer, _Unrecorded(module.trainer)
    try:
        module.optim_step()
    finally:
        module.trainer = trainer


class _Unrecorded:
    """The trainer, except that metrics recorded through it are dropped."""

    def __init__(self, trainer: Trainer):
        self._trainer = trainer

    def record_metric(self, *args: Any, **kwargs: Any) -> None:
        """Drop the metric."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)
