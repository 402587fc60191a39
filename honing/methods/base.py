"""The step plumbing every method shares, so that a method's ``train_batch`` is only its own maths.

Micro-batches (cut by the batch's collator), autocast, fp16's loss scale, gradient sync on the last micro-batch
only, the non-finite-loss policy, clipping with the grad-norm metric, the LR schedule and the optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from honing.data.collate import Collator, stack_collate
from honing.distributed import get_world_size, is_distributed
from honing.errors import ConfigError
from honing.methods.loss_scaling import LossScaler
from honing.methods.sequence_split import check_splittable, split_model_inputs, split_rows
from honing.models.parallel import clip_grads, gradient_sync, grads_by_mesh, total_grad_norm
from honing.optim.schedulers import lr_factor
from honing.parallel_dims import ParallelDims
from honing.train.metrics import ReduceType
from honing.train.precision import LOSS_SCALED_PRECISION
from honing.train.precision import autocast as precision_autocast
from honing.train.train_module import TrainModule

#: what a non-finite loss does: stop the run (the Trainer checks before every save) or skip the update
NONFINITE_POLICIES = ("stop", "skip")


class BaseTrainModule(TrainModule):
    """A TrainModule around one model and optimizer; subclasses implement ``train_batch`` and ``eval_batch``
    with the helpers here (``micro_batches``, ``forward``, ``backward_each``, ``record_loss``)."""

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
        nonfinite_loss: str | None = None,
        parallel_dims: ParallelDims | None = None,
    ):
        if nonfinite_loss is not None and nonfinite_loss not in NONFINITE_POLICIES:
            raise ConfigError(
                f"nonfinite_loss: expected one of {', '.join(NONFINITE_POLICIES)}, got {nonfinite_loss!r}"
            )
        self.model = model
        self.optimizer = optimizer
        self.micro_batch_size = micro_batch_size
        self.scheduler = scheduler or {"name": "constant"}
        self.grad_clip = grad_clip
        self.precision = precision
        self.device = torch.device(device)
        self.collator = collator or stack_collate
        # None: the policy of the Trainer this module is attached to (its config's), "stop" until then
        self._own_nonfinite_loss = nonfinite_loss
        self.nonfinite_loss = nonfinite_loss or "stop"
        self.parallel_dims = parallel_dims or ParallelDims(world_size=get_world_size())
        if self.parallel_dims.cp_enabled:
            check_splittable(self)
        self._params: list[torch.nn.Parameter] | None = None
        self._step_loss: torch.Tensor | None = None
        # fp16-mixed: gradients back-propagated at a dynamic loss scale (honing.methods.loss_scaling); None otherwise
        self.loss_scaler = self.build_loss_scaler() if precision == LOSS_SCALED_PRECISION else None

    def build_loss_scaler(self) -> LossScaler:
        """fp16-mixed's loss scaler, over fp32 trainable weights (the scale would not save float16 ones)."""
        low = sorted({str(p.dtype) for p in self.model.parameters() if p.requires_grad and p.dtype != torch.float32})
        if low:
            raise ConfigError(
                f"trainer.precision: 'fp16-mixed' keeps fp32 weights and autocasts to float16, but the trainable "
                f"weights are {', '.join(low)} (model.dtype): unset model.dtype, or use trainer.precision 'bf16'"
            )
        return LossScaler(self.device)

    def on_attach(self, trainer: Any) -> None:
        """Called once by the Trainer: without a policy of its own, the module follows the trainer's."""
        super().on_attach(trainer)
        if self._own_nonfinite_loss is None:
            self.nonfinite_loss = trainer.config.nonfinite_loss

    # --- what a method's step is made of ----------------------------------------------
    def autocast(self) -> AbstractContextManager:
        """bf16 autocast for ``bf16-mixed``, float16 for ``fp16-mixed`` (weights and optimizer stay fp32); a no-op
        otherwise."""
        return precision_autocast(self.precision, self.device.type)

    def micro_batches(self, batch: Any) -> list[dict[str, torch.Tensor]]:
        """This rank's batch cut by its collator into micro-batches, on the device; under ``parallel.cp`` each
        row cut to this rank's slice (``honing.methods.sequence_split``)."""
        micro_batches = [
            {key: value.to(self.device, non_blocking=True) for key, value in micro.items()}
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
        backward_scale = self.backward_scale(scale)
        for index, micro in enumerate(micro_batches):
            with gradient_sync(self.model, index == last):
                loss = loss_fn(micro)
                loss.backward(backward_scale)  # d(loss * scale): no extra multiply in the graph
            total = loss.detach() if total is None else total + loss.detach()
        assert total is not None, "a batch has at least one micro-batch"
        return total

    def backward_scale(self, scale: torch.Tensor | float) -> torch.Tensor | float:
        """What backward is called with for a loss weighted by ``scale``: ``scale``, times the loss scale under
        ``fp16-mixed`` (a loss that computes its gradients in the forward, the chunked head's, takes this too)."""
        return scale if self.loss_scaler is None else self.loss_scaler.scaled(scale)

    @property
    def grad_divisor(self) -> int:
        """How many ranks DDP / FSDP2 average the gradients over (a loss scaled by it and divided by the step's
        global count gives the one-process update)."""
        return self.parallel_dims.grad_divisor

    @property
    def data_parallel_size(self) -> int:
        """How many different batches one step reads (the data loader's slices)."""
        return self.parallel_dims.dp_size

    def sum_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the ranks that hold different tokens (itself in one process): tensor-parallel
        ranks hold the same tokens, so each is counted once."""
        if not is_distributed():
            return value
        value = value.clone()
        torch.distributed.all_reduce(value, group=self.parallel_dims.group("dp_cp"))
        return value

    def count_once(self, value: torch.Tensor | int) -> torch.Tensor | int:
        """``value`` on one rank of each tensor-parallel group and zero on the others, so a ``ReduceType.sum``
        metric counts the group's shared tokens once."""
        return value if self.parallel_dims.local_rank("tp") == 0 else value * 0

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
        return self.collator.num_tokens(batch) * self.data_parallel_size

    def current_lr_factor(self, step: int | None = None) -> float:
        """The schedule's multiplier for the step being taken (or for ``step``); under ``fp16-mixed`` the schedule
        runs behind by the steps skipped for an overflow (as transformers' Trainer's)."""
        if step is None:
            step = self.trainer.global_step if self.trainer is not None else 1
        if self.loss_scaler is not None:
            step = max(step - self.loss_scaler.skipped_steps, 1)
        max_steps = self.trainer.max_steps if self.trainer is not None else None
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

    def _loss_is_finite(self) -> bool:
        # The policy's price: one host sync a step. Gradients are reduced over ranks, so one rank's
        # non-finite loss poisons every rank's update: all ranks skip together.
        if self._step_loss is None:
            return True
        finite = torch.isfinite(self._step_loss).to(torch.int32).reshape(1)
        if is_distributed():
            finite = finite.cpu()
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        return bool(finite.item())

    def clip_grad_norm(self, max_norm: float | None) -> torch.Tensor:
        """The total norm of the optimizer's gradients, of the whole model however its weights are split over
        ranks; the gradients are then clipped to ``max_norm`` (None: left as they are)."""
        if self._params is None:  # listing parameters every step costs more than clipping a small model
            self._params = [p for group in self.optimizer.param_groups for p in group["params"]]
        groups = grads_by_mesh(self._params)
        grad_norm = total_grad_norm(self._params, groups)
        if max_norm is not None:
            clip_grads(self._params, max_norm, grad_norm, groups)
        return grad_norm

    def optim_step(self) -> None:
        """Clip (and log) the gradient norm, set this step's LR, and step the optimizer; under the ``skip``
        policy a step whose loss is not finite leaves the weights and the optimizer state untouched. Under
        ``fp16-mixed`` the gradients are unscaled before clipping, and a step whose gradients overflowed is
        skipped (``optim/skipped_steps``) and the scale backed off (``optim/loss_scale``: the step's scale)."""
        if self.nonfinite_loss == "skip" and not self._loss_is_finite():
            self.optimizer.zero_grad(set_to_none=True)
            if self.trainer is not None:
                self.trainer.record_metric("optim/skipped_steps", 1, ReduceType.max)
            return
        scaler = self.loss_scaler
        if scaler is not None:
            if self.trainer is not None:
                self.trainer.record_metric("optim/loss_scale", scaler.scale(), ReduceType.max)
            scaler.unscale(self.optimizer)
        grad_norm = self.clip_grad_norm(self.grad_clip)
        factor = self.current_lr_factor()
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor
        if scaler is None:
            self.optimizer.step()
        elif not scaler.step(self.optimizer):
            self.optimizer.zero_grad(set_to_none=True)
            if self.trainer is not None:
                self.trainer.record_metric("optim/skipped_steps", 1, ReduceType.max)
            return
        if self.trainer is not None:
            # the norm is of the already-reduced gradients, the same on every rank
            self.trainer.record_metric("optim/grad_norm", grad_norm, ReduceType.max)
            self.trainer.record_metric("optim/lr", self.optimizer.param_groups[0]["lr"], ReduceType.max)

    # --- checkpointed state beside the model and optimizer ------------------------------------
    def extra_state_dict(self) -> dict[str, Any]:
        """fp16-mixed's loss scale, its clean-step count and the skipped steps, so a resumed run steps the same."""
        state = super().extra_state_dict()
        if self.loss_scaler is not None:
            state["loss_scaler"] = self.loss_scaler.state_dict()
        return state

    def load_extra_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``extra_state_dict`` returned."""
        super().load_extra_state_dict(state_dict)
        if self.loss_scaler is not None and "loss_scaler" in state_dict:
            self.loss_scaler.load_state_dict(state_dict["loss_scaler"])
