"""Causal-LM TrainModule: next-token cross-entropy for pretraining and SFT alike."""

from __future__ import annotations

import math
from typing import Any

import torch

from honing.chunked_ce import linear_cross_entropy_eval, linear_cross_entropy_sum
from honing.losses import count_correct, count_target_tokens, cross_entropy_sum, next_token_targets
from honing.methods.base import BaseTrainModule
from honing.models.output_head import forward_with_head
from honing.models.wrappers import unwrap_model
from honing.train.metrics import ReduceType


class LMTrainModule(BaseTrainModule):
    """Next-token cross-entropy summed over every micro-batch and divided by the step's target tokens.

    With ``chunked_loss`` (the default) the LM head and the loss run over chunks of the positions that carry a
    target, inside the model's forward, so the full logits never exist (``honing.chunked_ce``); models whose head
    is not a plain linear layer get the full logits."""

    def __init__(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, chunked_loss: bool = True, **options
    ):
        super().__init__(model, optimizer, **options)
        self.chunked_loss = chunked_loss

    def loss_sum(self, micro: dict[str, torch.Tensor], grad_scale: torch.Tensor | float = 1.0) -> torch.Tensor:
        """The micro-batch's summed next-token cross-entropy; ``grad_scale``: what its backward will be called with
        (the chunked loss computes its gradients in the forward)."""
        if self.chunked_loss:
            targets = next_token_targets(micro["labels"])
            loss = forward_with_head(
                self.model,
                lambda hidden, weight, bias: linear_cross_entropy_sum(
                    hidden, weight, bias, targets, grad_scale=grad_scale
                ),
                lambda: self.forward(micro),
            )
            if loss is not None:
                return loss
        return cross_entropy_sum(self.forward(micro).logits, micro["labels"])

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes loss_sum / (target tokens of the whole step, over all ranks)."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        local_tokens = sum(count_target_tokens(m["labels"]) for m in micro_batches)
        # Times the world size because DDP/FSDP average gradients over ranks: the update is then the mean
        # over every target token of the step, however the batch is split into ranks and micro-batches.
        scale = self.world_size / self.sum_over_ranks(local_tokens).clamp(min=1)
        loss_sum = self.backward_each(micro_batches, lambda micro: self.loss_sum(micro, scale), scale)
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
            micro_loss, micro_correct = self.eval_sums(micro)
            loss_sum += micro_loss
            correct += micro_correct
            tokens += count_target_tokens(micro["labels"])
        return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

    def eval_sums(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(summed loss in float64, correct argmax predictions)`` of one micro-batch, without gradients."""
        if self.chunked_loss:
            targets = next_token_targets(micro["labels"])

            def head_fn(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
                # one tensor, so that it comes back as the output's logits (a count is exact in float64)
                return torch.stack(
                    [value.double() for value in linear_cross_entropy_eval(hidden, weight, bias, targets)]
                )

            sums = forward_with_head(self.model, head_fn, lambda: self.forward(micro))
            if sums is not None:
                return sums[0], sums[1].long()
        logits = self.forward(micro).logits
        return cross_entropy_sum(logits, micro["labels"]).double(), count_correct(logits, micro["labels"])

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
