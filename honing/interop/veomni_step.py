"""The parts of a ``BaseTrainer``'s default step (``honing.interop.veomni``) that are honing's own maths: the
next-token loss of ``LMTrainModule`` cut into VeOmni's pieces, and VeOmni's ``lr_scheduler`` over honing's schedule.

With nothing overridden, a ``BaseTrainer`` recipe's step is its method's: the same forwards (the loss head over
chunks), the same gradients, clipping and learning rates, so the same weights (``tests/interop/test_veomni_loop.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from honing.losses import IGNORE_INDEX, batch_targets
from honing.methods.lm import RouterLoss
from honing.train.metrics import ReduceType


class NextTokenLoss:
    """One step of an ``LMTrainModule``'s loss in VeOmni's pieces: ``begin`` counts the step's target tokens (the
    loss is their mean over every rank), ``forward`` is a micro-batch's forward with the summed loss as the output's
    ``loss``, ``share`` that loss's part of the step's mean (the router loss of an MoE model added), ``record`` the
    step's metrics."""

    def __init__(self, module: Any):
        self.module = module
        self.scale: torch.Tensor | None = None
        self.local_tokens: torch.Tensor | None = None
        self.router: Any = None

    def begin(self, micro_batches: list[dict[str, torch.Tensor]]) -> None:
        """The step's scale: ``grad_divisor / target tokens over all ranks`` (each micro-batch's targets added to
        it, shifted once on the host)."""
        module = self.module
        for micro in micro_batches:
            if "targets" not in micro:
                micro["targets"] = batch_targets(micro)
        local = sum((micro["targets"] != IGNORE_INDEX).sum() for micro in micro_batches)
        self.local_tokens = torch.as_tensor(local).to(module.device)
        # as LMTrainModule.train_batch: the update is the mean over every target token of the step
        self.scale = module.ranks.grad_divisor / module.ranks.sum(self.local_tokens).clamp(min=1)
        self.router = None
        self.total: Any = 0.0  # the step's loss so far (the micro-batches' shares), recorded once
        self.recorded = False
        if module.router_aux_loss_coef is not None:
            routed = [
                {key: micro[key].to(module.device) for key in ("input_ids", "attention_mask") if key in micro}
                for micro in micro_batches
            ]
            self.router = RouterLoss(module, routed, self.scale)

    def forward(self, micro: dict[str, torch.Tensor]) -> Any:
        """The model's output for ``micro`` (on the device), its ``loss`` the summed next-token cross-entropy."""
        loss_sum, outputs = self.module.forward_loss(micro, self.scale)
        outputs["loss"] = loss_sum
        return outputs

    def share(self, outputs: Any, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The micro-batch's part of the step's loss, and its ``loss_dict`` (``ce_loss``, ``aux_loss``)."""
        loss = outputs.loss
        loss_dict = {"ce_loss": outputs.loss.detach() * self.scale}
        if self.router is not None:
            aux = self.router.loss(micro, outputs)
            loss = loss + aux
            loss_dict["aux_loss"] = aux.detach() * self.scale
        # (loss_sum + aux) · scale, backward with 1: the gradients backward(scale) gives honing's own step
        share = loss * self.scale
        self.total = self.total + share.detach()
        return share, loss_dict

    def record(self, loss: torch.Tensor) -> None:
        """The step's ``train/loss`` (for the non-finite policy too), target tokens and router metrics."""
        module = self.module
        self.recorded = True
        module.record_loss(loss, cross_entropy=True)
        if module.trainer is not None:
            tokens = module.ranks.count_once(self.local_tokens)
            module.trainer.record_metric("train/target_tokens", tokens, ReduceType.sum)
            if self.router is not None:
                self.router.record(module.trainer, module.router_layers)


class LRScheduler:
    """VeOmni's ``lr_scheduler`` over honing's schedule (the ``scheduler`` section): ``step()`` after the optimizer's
    records the LR the step trained with (``optim/lr``) and sets the next step's, as the method's own step would have
    set it before its optimizer step."""

    def __init__(self, module: Any):
        self.module = module

    def sync(self) -> None:
        """Set the LR of the step after the trainer's current one (the first step to train, on train begin)."""
        step = self.module.trainer.global_step + 1
        factor = self.module.current_lr_factor(step)
        for group in self.module.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor

    def step(self) -> None:
        """Record the LR just used, then set the next step's."""
        trainer = self.module.trainer
        trainer.record_metric("optim/lr", self.module.optimizer.param_groups[0]["lr"], ReduceType.max)
        self.sync()

    def get_last_lr(self) -> list[float]:
        """Each parameter group's current LR (torch's name)."""
        return [group["lr"] for group in self.module.optimizer.param_groups]
