"""The step plumbing every method shares, so that a method's ``train_batch`` is only its own maths.

Micro-batches (cut by the batch's collator), autocast, gradient sync on the last micro-batch only, the step's loss;
the rank arithmetic is ``self.ranks``'s (``honing.methods.step_ranks``), the optimizer's half of the step (the
non-finite-loss policy, fp16's loss scale, clipping, the LR schedule) ``self.updater``'s
(``honing.methods.optimizer_update``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from honing.data.collate import Collator, stack_collate
from honing.distributed import get_world_size
from honing.errors import ConfigError
from honing.methods.loss_scaling import LossScaler
from honing.methods.optimizer_update import OptimizerUpdate
from honing.methods.sequence_split import check_splittable, split_model_inputs, split_rows
from honing.methods.step_ranks import StepRanks
from honing.models.parallel import gradient_sync
from honing.parallel_dims import ParallelDims
from honing.train.metrics import ReduceType
from honing.train.precision import LOSS_SCALED_PRECISION
from honing.train.precision import autocast as precision_autocast
from honing.train.train_module import TrainModule

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


class BaseTrainModule(TrainModule):
    """A TrainModule around one model and optimizer; subclasses implement ``train_batch`` and ``eval_batch``
    with the helpers here (``micro_batches``, ``forward``, ``backward_each``, ``record_loss``), ``self.ranks``
    and ``self.updater``."""

    #: whether the method's step can train on slices of rows (``parallel.cp``): its loss reads ``batch_targets``
    splits_rows: bool = False

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        micro_batch_size: int,
        scheduler: dict[str, Any] | None = None,
        grad_clip: float | None = 1.0,
        precision: str = "fp32",
        device: torch.device | str = "cpu",
        collator: Collator | None = None,
        parallel_dims: ParallelDims | None = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.micro_batch_size = micro_batch_size
        self.precision = precision
        self.device = torch.device(device)
        self.collator = collator or stack_collate
        self.parallel_dims = parallel_dims or ParallelDims(world_size=get_world_size())
        if self.parallel_dims.cp_enabled:
            check_splittable(self)
        self.ranks = StepRanks(self.parallel_dims)
        # fp16-mixed: gradients back-propagated at a dynamic loss scale (honing.methods.loss_scaling)
        scaler = loss_scaler_for(model, self.device) if precision == LOSS_SCALED_PRECISION else None
        self.updater = OptimizerUpdate(optimizer, scheduler=scheduler, grad_clip=grad_clip, loss_scaler=scaler)
        #: bf16 autocast for ``bf16-mixed``, float16 for ``fp16-mixed`` (weights and optimizer stay fp32); a no-op
        #: otherwise: a function that returns the context
        self.autocast = partial(precision_autocast, precision, self.device.type)
        self._step_loss: torch.Tensor | None = None

    def on_attach(self, trainer: Trainer) -> None:
        """Called once by the Trainer: the optimizer step follows the trainer section's non-finite-loss policy."""
        super().on_attach(trainer)
        self.updater.skip_nonfinite = trainer.config.skips_nonfinite_steps

    # --- what a method's step is made of ----------------------------------------------
    def micro_batches(self, batch: Any) -> list[dict[str, torch.Tensor]]:
        """This rank's batch cut by its collator into micro-batches, on the device; under ``parallel.cp`` each
        row cut to this rank's slice (``honing.methods.sequence_split``)."""
        device = self.device
        micro_batches = [  # moved only when elsewhere: a no-op ``.to`` per key is still an operator call
            {
                key: value if value.device == device else value.to(device, non_blocking=True)
                for key, value in micro.items()
            }
            for micro in self.collator.split(batch, self.micro_batch_size)
        ]
        if self.parallel_dims.cp_enabled:
            rank, size = self.parallel_dims.local_rank("cp"), self.parallel_dims.cp
            micro_batches = [split_rows(micro, rank, size) for micro in micro_batches]
        return micro_batches

    def forward(self, micro_batch: dict[str, torch.Tensor], **options: Any) -> Any:
        """The model's output for a micro-batch (the collator names the model's inputs; ``options`` are more
        keywords of its forward, e.g. ``output_router_logits``), under autocast."""
        if self.parallel_dims.cp_enabled:  # the mask over whole rows, built here: one micro-batch's at a time
            inputs = split_model_inputs(self.model, micro_batch)
        else:
            inputs = self.collator.model_inputs(micro_batch)
        with self.autocast():
            return self.model(**inputs, use_cache=False, **options)

    def start_step(self) -> None:
        """Put the model in training mode (only when it is not: ``train()`` walks every module)."""
        if not self.model.training:  # ~0.3 ms a step on a small model
            self.model.train()

    def backward_each(
        self,
        micro_batches: Sequence[dict[str, torch.Tensor]],
        loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
        scale: torch.Tensor | float,
    ) -> torch.Tensor:
        """Back-propagate ``loss_fn(micro) * scale`` for every micro-batch (times fp16's loss scale), gradients
        reduced over ranks once (after the last); return the sum of the unscaled losses, detached."""
        total: torch.Tensor | None = None
        last = len(micro_batches) - 1
        backward_scale = self.updater.backward_scale(scale)
        for index, micro in enumerate(micro_batches):
            with gradient_sync(self.model, index == last):
                loss = loss_fn(micro)
                loss.backward(backward_scale)  # d(loss * scale): no extra multiply in the graph
            total = loss.detach() if total is None else total + loss.detach()
        assert total is not None, "a batch has at least one micro-batch"
        return total

    def record_loss(self, loss: torch.Tensor, *, cross_entropy: bool, dry_run: bool = False) -> None:
        """Record the step's ``train/loss`` (a cross-entropy also gets its perplexity at log time) and keep it
        for the non-finite policy."""
        self._step_loss = loss
        if self.trainer is None or dry_run:
            return
        if cross_entropy:
            self.trainer.record_ce_loss(loss, ReduceType.mean)
        else:
            self.trainer.record_metric("train/loss", loss, ReduceType.mean)

    # --- the rest of the step ---------------------------------------------------------
    def zero_grads(self) -> None:
        """Reset gradients before the next step."""
        self.optimizer.zero_grad(set_to_none=True)

    def num_tokens(self, batch: Any) -> int:
        """This rank's real tokens times the number of batches a step reads."""
        return self.collator.num_tokens(batch) * self.ranks.dp_size

    def current_lr_factor(self, step: int | None = None) -> float:
        """The schedule's multiplier for the step being taken (or for ``step``): ``OptimizerUpdate.lr_factor``."""
        return self.updater.lr_factor(self.trainer, step)

    def optim_step(self) -> None:
        """The optimizer's half of the step (``OptimizerUpdate.step``) on the step's recorded loss."""
        self.updater.step(self, self._step_loss)

    # --- checkpointed state beside the model and optimizer ------------------------------------
    def extra_state_dict(self) -> dict[str, Any]:
        """fp16-mixed's loss scale, its clean-step count and the skipped steps, so a resumed run steps the same."""
        state = super().extra_state_dict()
        if self.updater.loss_scaler is not None:
            state["loss_scaler"] = self.updater.loss_scaler.state_dict()
        return state

    def load_extra_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``extra_state_dict`` returned."""
        super().load_extra_state_dict(state_dict)
        if self.updater.loss_scaler is not None and "loss_scaler" in state_dict:
            self.updater.loss_scaler.load_state_dict(state_dict["loss_scaler"])


def loss_scaler_for(model: torch.nn.Module, device: torch.device) -> LossScaler:
    """fp16-mixed's loss scaler, over fp32 trainable weights (the scale would not save float16 ones)."""
    low = sorted({str(p.dtype) for p in model.parameters() if p.requires_grad and p.dtype != torch.float32})
    if low:
        raise ConfigError(
            f"trainer.precision: 'fp16-mixed' keeps fp32 weights and autocasts to float16, but the trainable "
            f"weights are {', '.join(low)} (model.dtype): unset model.dtype, or use trainer.precision 'bf16'"
        )
    return LossScaler(device)
