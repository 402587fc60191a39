"""Causal-LM TrainModule: next-token cross-entropy for pretraining and SFT alike."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from honing.distributed import all_reduce_sum, get_world_size, is_distributed
from honing.errors import ConfigError
from honing.losses import count_correct, count_target_tokens, cross_entropy_sum
from honing.models.export import unwrap_model
from honing.models.parallel import gradient_sync
from honing.optim.schedulers import lr_factor
from honing.train.metrics import ReduceType
from honing.train.train_module import TrainModule

MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "position_ids")


class LMTrainModule(TrainModule):
    """Splits each global batch into micro-batches, normalises the loss by the step's target tokens,
    clips gradients and steps AdamW with the configured LR schedule."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, micro_batch_size: int,
                 scheduler: dict[str, Any] | None = None, grad_clip: float | None = 1.0,
                 precision: str = "fp32", device: torch.device | str = "cpu"):
        self.model = model
        self.optimizer = optimizer
        self.micro_batch_size = micro_batch_size
        self.scheduler = scheduler or {"name": "constant"}
        self.grad_clip = grad_clip
        self.precision = precision
        self.device = torch.device(device)
        self._params: list[torch.nn.Parameter] | None = None

    # --- the step ---------------------------------------------------------------------
    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast for ``bf16-mixed`` (weights and optimizer stay fp32); a no-op otherwise."""
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _micro_batches(self, batch: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
        rows = batch["input_ids"].shape[0]
        size = min(self.micro_batch_size, rows)
        return [{k: v[i:i + size].to(self.device, non_blocking=True) for k, v in batch.items()
                 if isinstance(v, torch.Tensor)} for i in range(0, rows, size)]

    def _logits(self, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: micro[k] for k in MODEL_INPUT_KEYS if k in micro}
        with self.autocast():
            return self.model(**inputs, use_cache=False).logits

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Forward/backward every micro-batch; each contributes loss_sum / (tokens in the whole step)."""
        if not self.model.training:  # train() walks every module: ~0.3 ms a step on a small model
            self.model.train()
        micro_batches = self._micro_batches(batch)
        local_tokens = sum(count_target_tokens(m["labels"]) for m in micro_batches)
        # Divide by the target tokens of the whole step on all ranks, times the world size because
        # DDP/FSDP average gradients over ranks: the update is then the mean over every target
        # token of the step, however the batch is split into ranks and micro-batches.
        step_tokens = all_reduce_sum(local_tokens.clone()) if is_distributed() else local_tokens
        scale = get_world_size() / step_tokens.clamp(min=1)
        loss_total: torch.Tensor | None = None
        for index, micro in enumerate(micro_batches):
            # DDP / FSDP reduce gradients over ranks once, after the step's last micro-batch
            with gradient_sync(self.model, index == len(micro_batches) - 1):
                loss_sum = cross_entropy_sum(self._logits(micro), micro["labels"])
                loss_sum.backward(scale)  # d(loss_sum * scale): no extra multiply in the graph
            loss_total = loss_sum.detach() if loss_total is None else loss_total + loss_sum.detach()
        if self.trainer is not None and not dry_run:
            # loss_sum · world / step_tokens on each rank, averaged over ranks: the step's mean over
            # every target token, also when ranks hold different numbers of them (assistant-only SFT)
            self.trainer.record_ce_loss(loss_total * scale, ReduceType.mean)
            self.trainer.record_metric("train/target_tokens", local_tokens, ReduceType.sum)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Summed loss, target tokens and correct predictions over the batch."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        tokens = torch.zeros((), device=self.device, dtype=torch.long)
        for micro in self._micro_batches(batch):
            logits = self._logits(micro)
            loss_sum += cross_entropy_sum(logits, micro["labels"]).double()
            correct += count_correct(logits, micro["labels"])
            tokens += count_target_tokens(micro["labels"])
        return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

    def current_lr_factor(self) -> float:
        """The schedule's multiplier for the step being taken."""
        step = self.trainer.global_step if self.trainer is not None else 1
        max_steps = self.trainer.max_steps if self.trainer is not None else None
        if max_steps is None and self.scheduler.get("name", "constant") != "constant":
            raise ConfigError(f"scheduler.name {self.scheduler['name']!r} needs the run's total number of steps, "
                              "which this data loader cannot tell ahead of time; give trainer.max_duration in steps")
        max_steps = max_steps or step
        return lr_factor(step, max_steps=max_steps, **self.scheduler)

    def optim_step(self) -> None:
        """Clip (and log) the gradient norm, set this step's LR, and step AdamW."""
        if self._params is None:  # listing parameters every step costs more than clipping a small model
            self._params = [p for group in self.optimizer.param_groups for p in group["params"]]
        params = self._params
        if self.grad_clip is not None:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if isinstance(grad_norm, DTensor):  # FSDP2: the global norm, replicated on every rank
            grad_norm = grad_norm.full_tensor()
        factor = self.current_lr_factor()
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * factor
        self.optimizer.step()
        if self.trainer is not None:
            # the norm is of the already-reduced gradients, the same on every rank
            self.trainer.record_metric("optim/grad_norm", grad_norm, ReduceType.max)
            self.trainer.record_metric("optim/lr", self.optimizer.param_groups[0]["lr"], ReduceType.max)

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """6 FLOPs per weight per token (forward + backward) for the matmul weights and the LM head,
        plus 12·layers·hidden·seq_len for attention scores (PaLM, appendix B)."""
        model = unwrap_model(self.model)  # a DDP wrapper has no config or embeddings of its own
        config = getattr(model, "config", None)
        params = sum(p.numel() for p in model.parameters())  # FSDP2 DTensors count their full size
        embeddings = model.get_input_embeddings()
        head = model.get_output_embeddings()
        matmul_params = params - embeddings.weight.numel()
        if head is not None and head.weight is embeddings.weight:
            matmul_params += head.weight.numel()  # a tied head still costs its matmul
        layers = getattr(config, "num_hidden_layers", 0)
        hidden = getattr(config, "hidden_size", 0)
        return 6 * matmul_params + 12 * layers * hidden * seq_len
