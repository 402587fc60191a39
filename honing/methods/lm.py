"""Causal-LM TrainModule: next-token cross-entropy for pretraining and SFT alike."""

from __future__ import annotations

import contextlib
import functools
import math
import operator
from typing import TYPE_CHECKING, Any

import torch

from honing.chunked_ce import linear_cross_entropy_eval, linear_cross_entropy_sum
from honing.errors import ConfigError
from honing.losses import IGNORE_INDEX, batch_targets, count_correct_targets, targets_cross_entropy_sum
from honing.methods.base import BaseTrainModule
from honing.methods.neftune import noisy_embeddings
from honing.models import moe
from honing.models.output_head import forward_with_head
from honing.models.wrappers import transformers_model, unwrap_model
from honing.train.metrics import ReduceType

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


class LMTrainModule(BaseTrainModule):
    """Next-token cross-entropy summed over every micro-batch and divided by the step's target tokens; a
    mixture-of-experts model adds its router's load-balancing loss times ``router_aux_loss_coef`` (None: the
    model config's own), weighted as :class:`RouterLoss` says.

    With ``chunked_loss`` (the default) the LM head and the loss run over chunks of the positions that carry a
    target, inside the model's forward, so the full logits never exist (``honing.chunked_ce``); models whose head
    is not a plain linear layer get the full logits.

    ``neftune_noise_alpha`` (SFT's NEFTune): uniform noise on the input embeddings of the training forwards
    (``honing.methods.neftune``); None: none."""

    splits_rows = True  # parallel.cp: the loss reads each rank's slice of targets shifted on whole rows

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        chunked_loss: bool = True,
        router_aux_loss_coef: float | None = None,
        neftune_noise_alpha: float | None = None,
        **options,
    ):
        super().__init__(model, optimizer, **options)
        self.chunked_loss = chunked_loss
        if neftune_noise_alpha is not None and (self.parallel_dims.cp > 1 or self.parallel_dims.tp > 1):
            raise ConfigError(
                f"sft.neftune_noise_alpha: not available with parallel.cp={self.parallel_dims.cp} / "
                f"tp={self.parallel_dims.tp} (the noise is scaled by whole sequences); use cp=1 and tp=1, or unset it"
            )
        self.neftune_noise_alpha = neftune_noise_alpha
        config = getattr(transformers_model(model), "config", None)
        # None for a dense model: its forward is asked for no router logits and nothing is added to its loss
        self.router_aux_loss_coef = moe.router_aux_loss_coef(config, router_aux_loss_coef)
        self.router_top_k = getattr(moe.text_config(config), "num_experts_per_tok", None)
        self.router_layers = moe.router_layers(model) if self.router_aux_loss_coef is not None else None

    def forward_loss(self, micro: dict[str, torch.Tensor], grad_scale: torch.Tensor | float = 1.0) -> tuple[Any, Any]:
        """The micro-batch's summed next-token cross-entropy and the model's output (an MoE model's carries its
        ``aux_loss`` and ``router_logits``); ``grad_scale``: what the loss's backward will be called with (the
        chunked loss computes its gradients in the forward)."""
        options = {} if self.router_aux_loss_coef is None else {"output_router_logits": True}
        targets = batch_targets(micro)  # of this rank's slice of the rows under parallel.cp
        outputs: Any = None

        def run_forward() -> Any:
            nonlocal outputs
            noise = (
                contextlib.nullcontext()
                if self.neftune_noise_alpha is None
                else noisy_embeddings(self.model, self.neftune_noise_alpha, micro)
            )
            with noise:
                outputs = self.forward(micro, **options)
            return outputs

        if self.chunked_loss:
            loss = forward_with_head(
                self.model,
                lambda hidden, weight, bias: linear_cross_entropy_sum(
                    hidden, weight, bias, targets, grad_scale=grad_scale
                ),
                run_forward,
            )
            if loss is not None:
                return loss, outputs
        run_forward()
        return targets_cross_entropy_sum(outputs.logits, targets), outputs

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes its summed cross-entropy / (target tokens of the whole step, over all
        ranks), and for an MoE model its router loss as :class:`RouterLoss` weights it."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        for micro in micro_batches:  # shifted once: counted here, trained on in forward_loss (batch_targets)
            if "targets" not in micro:
                micro["targets"] = batch_targets(micro)
        local_tokens = added([(micro["targets"] != IGNORE_INDEX).sum() for micro in micro_batches])
        # Times the ranks DDP/FSDP average gradients over: the update is then the mean over every target token
        # of the step, however the batch is split into ranks, sequence slices and micro-batches.
        scale = self.ranks.grad_divisor / self.ranks.sum(local_tokens).clamp(min=1)
        router = None if self.router_aux_loss_coef is None else RouterLoss(self, micro_batches, scale)
        loss_sums: list[torch.Tensor] = []
        # what backward_each calls backward with (fp16: times the loss scale)
        grad_scale = self.updater.backward_scale(scale)

        def micro_loss(micro: dict[str, torch.Tensor]) -> torch.Tensor:
            loss_sum, outputs = self.forward_loss(micro, grad_scale)
            loss_sums.append(loss_sum.detach())
            return loss_sum if router is None else loss_sum + router.loss(micro, outputs)

        self.backward_each(micro_batches, micro_loss, scale)
        # loss_sum · divisor / step_tokens on each rank, averaged over ranks: the step's mean over every target
        # token, also when ranks hold different numbers of them (assistant-only SFT)
        self.record_loss(added(loss_sums) * scale, cross_entropy=True, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            self.trainer.record_metric("train/target_tokens", self.ranks.count_once(local_tokens), ReduceType.sum)
            if router is not None:
                router.record(self.trainer, self.router_layers)

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
            tokens += (batch_targets(micro) != IGNORE_INDEX).sum()
        return {"loss_sum": loss_sum, "tokens": tokens, "correct": correct}

    def eval_sums(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(summed loss in float64, correct argmax predictions)`` of one micro-batch, without gradients."""
        targets = batch_targets(micro)
        if self.chunked_loss:

            def head_fn(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
                # one tensor, so that it comes back as the output's logits (a count is exact in float64)
                return torch.stack(
                    [value.double() for value in linear_cross_entropy_eval(hidden, weight, bias, targets)]
                )

            sums = forward_with_head(self.model, head_fn, lambda: self.forward(micro))
            if sums is not None:
                return sums[0], sums[1].long()
        logits = self.forward(micro).logits
        return targets_cross_entropy_sum(logits, targets).double(), count_correct_targets(logits, targets)

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The mean loss per target token, its perplexity, and token accuracy."""
        tokens = max(totals["tokens"], 1.0)
        loss = totals["loss_sum"] / tokens
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "token_accuracy": totals["correct"] / tokens}

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """6 FLOPs per weight per token (forward + backward) for the matmul weights a token uses (of an MoE layer's
        experts, its top-k) and the LM head, plus 12·layers·hidden·seq_len for attention scores (PaLM, appendix B)."""
        model = unwrap_model(self.model)  # a DDP wrapper has no config or embeddings of its own
        config = getattr(model, "config", None)
        params = sum(p.numel() for p in model.parameters())  # FSDP2 DTensors count their full size
        embeddings = model.get_input_embeddings()
        head = model.get_output_embeddings()
        matmul_params = params - embeddings.weight.numel() - moe.inactive_expert_params(model)  # MoE: the active ones
        if head is not None and head.weight is embeddings.weight:
            matmul_params += head.weight.numel()  # a tied head still costs its matmul
        layers = getattr(config, "num_hidden_layers", 0)
        hidden = getattr(config, "hidden_size", 0)
        return 6 * matmul_params + 12 * layers * hidden * seq_len


def added(values: list[torch.Tensor]) -> torch.Tensor:
    """``sum(values)`` without its leading ``0 +``: one operator call fewer, the same numbers (``0 + x`` is ``x``)."""
    return functools.reduce(operator.add, values)


class RouterLoss:
    """One step's router load-balancing loss of an MoE model, and the expert loads it is logged with.

    transformers' ``aux_loss`` is the Switch Transformer loss of one forward, a mean over its routed tokens (the
    attention mask's ones). Each micro-batch's is weighted by its share of the step's routed tokens over all ranks,
    so the step adds ``coef`` times their token-weighted mean (OLMo-core's weighting): a micro-batch or rank with
    more tokens counts more, and the router's gradient does not grow with the number of micro-batches or ranks.
    The split still matters in one way no weighting removes: each forward's loss measures the experts' token
    fractions on its own tokens (they are not differentiable, so they are not summed over micro-batches first);
    micro-batches that route alike give exactly the one-micro-batch update.
    """

    def __init__(self, module: LMTrainModule, micro_batches: list[dict[str, torch.Tensor]], scale: torch.Tensor):
        self.coef, self.top_k = module.router_aux_loss_coef, module.router_top_k
        self.step_tokens = module.ranks.sum(sum(moe.routed_tokens(m) for m in micro_batches)).clamp(min=1)
        self.grad_divisor = module.ranks.grad_divisor
        # backward is called with ``scale`` (the cross-entropy's 1 / step target tokens × grad_divisor); the router
        # term is divided by it so that its gradient is grad_divisor · coef · share, averaged over grad_divisor ranks
        self.weight = self.grad_divisor * self.coef / (self.step_tokens * scale)
        self.aux_sum: torch.Tensor | float = 0.0  # the unweighted losses times their tokens: the logged mean
        self.loads: torch.Tensor | None = None  # [routers, experts] over this rank's tokens of the step

    def loss(self, micro: dict[str, torch.Tensor], outputs: Any) -> torch.Tensor:
        """The micro-batch's router term, to add to its summed cross-entropy; keeps its loss and expert loads."""
        tokens = moe.routed_tokens(micro)
        self.aux_sum = self.aux_sum + outputs.aux_loss.detach() * tokens
        loads = moe.expert_loads(outputs.router_logits, self.top_k, micro.get("attention_mask"))
        self.loads = loads if self.loads is None else self.loads + loads
        return outputs.aux_loss * (tokens * self.weight)

    def record(self, trainer: Trainer, layers: list[int] | None) -> None:
        """``train/aux_loss`` (unweighted, the step's token-weighted mean over all ranks) and each router's expert
        load imbalance over this rank's tokens of the step (max / mean load; the largest over ranks, as OLMo-core),
        ``.../max`` the largest over layers. Tensors all: nothing waits for the device."""
        # times grad_divisor, then averaged over ranks: the mean over every routed token of the step
        trainer.record_metric("train/aux_loss", self.aux_sum * self.grad_divisor / self.step_tokens, ReduceType.mean)
        if self.loads is None:
            return
        imbalance = moe.load_imbalance(self.loads)
        if layers is None or len(layers) != len(imbalance):
            layers = list(range(len(imbalance)))
        for layer, value in zip(layers, imbalance):
            trainer.record_metric(f"train/expert_load_imbalance/layer_{layer}", value, ReduceType.max)
        trainer.record_metric("train/expert_load_imbalance/max", imbalance.max(), ReduceType.max)
