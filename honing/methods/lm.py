"""Causal-LM TrainModule: next-token cross-entropy for pretraining and SFT alike."""

from __future__ import annotations

import math
from typing import Any

import torch

from honing.losses import count_correct, count_target_tokens, cross_entropy_sum
from honing.methods.base import BaseTrainModule
from honing.models.wrappers import unwrap_model
from honing.train.metrics import ReduceType


class LMTrainModule(BaseTrainModule):
    """Next-token cross-entropy summed over every micro-batch and divided by the step's target tokens."""

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes loss_sum / (target tokens of the whole step, over all ranks)."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        local_tokens = sum(count_target_tokens(m["labels"]) for m in micro_batches)
        # Times the world size because DDP/FSDP average gradients over ranks: the update is then the mean
        # over every target token of the step, however the batch is split into ranks and micro-batches.
        scale = self.world_size / self.sum_over_ranks(local_tokens).clamp(min=1)
        loss_sum = self.backward_each(
            micro_batches, lambda micro: cross_entropy_sum(self.forward(micro).logits, micro["labels"]), scale
        )
        # loss_sum · world / step_tokens on each rank, averaged over ranks: the step's mean over every target
        # token, also when ranks hold different numbers of them (assistant-only SFT)
        self.record_loss(loss_sum * scale, cross_entropy=True, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            self.trainer.record_metric("train/target_tokens", local_tokens, ReduceType.sum)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Summed loss, target tokens and correct predictions over the batch."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.long)
        tokens = torch.zeros((), device=self.device, dtype=torch.long)
        for micro in self.micro_batches(batch):
            logits = self.forward(micro).logits
            loss_sum += cross_entropy_sum(logits, micro["labels"]).double()
            correct += count_correct(logits, micro["labels"])
            tokens += count_target_tokens(micro["labels"])
        return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The mean loss per target token, its perplexity, and token accuracy."""
        tokens = max(totals["tokens"], 1.0)
        loss = totals["loss_sum"] / tokens
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "token_accuracy": totals["correct"] / tokens}

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
