"""DPO TrainModule: chosen and rejected scored in one forward, against a frozen reference, TRL's losses and metrics."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule

from honing import chunked_ce
from honing.errors import ConfigError
from honing.losses import DPO_LOSS_TYPES, IGNORE_INDEX, completion_logps, dpo_loss
from honing.methods.base import BaseTrainModule
from honing.methods.lm import LMTrainModule
from honing.models.output_head import forward_with_head
from honing.models.pair_attention import enable_pair_attention
from honing.models.wrappers import is_lora, unwrap_model
from honing.train.metrics import ReduceType

#: where the reference's log-probs come from: a frozen copy, the LoRA model with its adapters off, or the batch
REFERENCE_MODES = ("copy", "adapters_off", "precompute")
#: per-pair sums a step or an evaluation adds up (``pairs`` counts them); metrics are their means over pairs
PAIR_SUMS = (
    "loss_sum",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


class DPOTrainModule(BaseTrainModule):
    """The mean over the step's pairs of the DPO loss (+ ``rpo_alpha`` times the chosen completions' token-mean
    negative log-likelihood), whatever the split of the step into ranks and micro-batches."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        beta: float = 0.1,
        loss_type: str = "sigmoid",
        label_smoothing: float = 0.0,
        rpo_alpha: float | None = None,
        reference: str = "copy",
        reference_model: torch.nn.Module | None = None,
        chunked_loss: bool = True,
        packed_pairs: bool = True,
        **options: Any,
    ):
        super().__init__(model, optimizer, **options)
        self.chunked_loss = chunked_loss
        if loss_type not in DPO_LOSS_TYPES:
            raise ConfigError(f"dpo.loss_type: expected one of {', '.join(DPO_LOSS_TYPES)}, got {loss_type!r}")
        if reference not in REFERENCE_MODES:
            raise ConfigError(f"dpo.reference: expected one of {', '.join(REFERENCE_MODES)}, got {reference!r}")
        if reference == "copy" and reference_model is None:
            raise ConfigError("dpo.reference 'copy' needs a reference model")
        if reference == "adapters_off" and not is_lora(model):
            raise ConfigError("dpo.reference 'adapters_off' needs a LoRA model (model.lora); use copy or precompute")
        self.beta, self.loss_type, self.label_smoothing = beta, loss_type, label_smoothing
        self.rpo_alpha = rpo_alpha or 0.0
        self.reference = reference
        self.reference_model = reference_model
        # a step's pairs in one row without padding, attended pair by pair (honing.models.pair_attention)
        models = [model] if reference_model is None else [model, reference_model]
        self.packed_pairs = packed_pairs and all(enable_pair_attention(m) for m in models)

    # --- the maths ------------------------------------------------------------------------------
    def reference_logps(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's log-probs of each pair's chosen and rejected completion."""
        if "ref_chosen_logps" in micro:
            return micro["ref_chosen_logps"], micro["ref_rejected_logps"]
        if self.reference == "precompute":
            raise RuntimeError("dpo.reference is 'precompute' but the batch carries no reference log-probs")
        with torch.no_grad(), self._reference_context() as model:
            logps, _ = pair_logps(
                model,
                micro,
                self.collator,
                autocast=self.autocast,
                chunked=self.chunked_loss,
                packed=self.packed_pairs,
            )
        return logps[:, 0], logps[:, 1]

    @contextlib.contextmanager
    def _reference_context(self) -> Iterator[torch.nn.Module]:
        if self.reference != "adapters_off":
            yield self.reference_model if self.reference_model is not None else self.model
            return
        # the same weights with peft's adapters bypassed, in eval mode so dropout never touches the reference
        inner = unwrap_model(self.model)
        was_training = inner.training
        inner.eval()
        try:
            with inner.disable_adapter():
                yield self.model
        finally:
            inner.train(was_training)

    def pair_terms(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-pair losses and log-probs of one micro-batch (one policy forward for chosen and rejected), and the
        chosen completions' summed negative log-likelihood and token count (the RPO term)."""
        logps, lengths = pair_logps(
            self.model,
            micro,
            self.collator,
            autocast=self.autocast,
            chunked=self.chunked_loss,
            packed=self.packed_pairs,
        )
        ref_chosen, ref_rejected = self.reference_logps(micro)
        chosen, rejected = logps[:, 0], logps[:, 1]
        ref_chosen, ref_rejected = ref_chosen.to(chosen.dtype), ref_rejected.to(chosen.dtype)
        losses = dpo_loss(
            chosen,
            rejected,
            ref_chosen,
            ref_rejected,
            beta=self.beta,
            loss_type=self.loss_type,
            label_smoothing=self.label_smoothing,
            chosen_lengths=lengths[:, 0],
            rejected_lengths=lengths[:, 1],
        )
        return {
            "losses": losses,
            "chosen": chosen,
            "rejected": rejected,
            "chosen_rewards": self.beta * (chosen - ref_chosen).detach(),
            "rejected_rewards": self.beta * (rejected - ref_rejected).detach(),
            "chosen_nll": -chosen.sum(),
            "chosen_tokens": lengths[:, 0].sum(),
            "real": (lengths[:, 0] > 0).to(chosen.dtype),  # a filler pair has no completion tokens
        }

    @staticmethod
    def pair_sums(terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The micro-batch's sums over its real pairs of the loss and of each metric (TRL's names)."""
        real = terms["real"]
        chosen_rewards, rejected_rewards = terms["chosen_rewards"], terms["rejected_rewards"]
        return {
            "loss_sum": (terms["losses"].detach() * real).sum(),
            "rewards/chosen": (chosen_rewards * real).sum(),
            "rewards/rejected": (rejected_rewards * real).sum(),
            "rewards/accuracies": ((chosen_rewards > rejected_rewards).to(real.dtype) * real).sum(),
            "rewards/margins": ((chosen_rewards - rejected_rewards) * real).sum(),
            "logps/chosen": (terms["chosen"].detach() * real).sum(),
            "logps/rejected": (terms["rejected"].detach() * real).sum(),
        }

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes Σ pair losses / (pairs of the whole step, over all ranks), plus the RPO
        term's share: its chosen NLL / (chosen tokens of the whole step)."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        local_pairs = torch.tensor(sum(m["input_ids"].shape[0] for m in micro_batches), device=self.device)
        step_pairs = self.sum_over_ranks(local_pairs).clamp(min=1)
        # times the world size because DDP / FSDP average gradients over ranks (as in LMTrainModule)
        scale = self.grad_divisor / step_pairs
        rpo_weight = None
        if self.rpo_alpha:
            chosen_tokens = sum((m["targets"][..., 0] != IGNORE_INDEX).sum() for m in micro_batches)
            rpo_weight = self.rpo_alpha * step_pairs / self.sum_over_ranks(chosen_tokens).clamp(min=1)
        sums: dict[str, torch.Tensor] = {}

        def loss_fn(micro: dict[str, torch.Tensor]) -> torch.Tensor:
            terms = self.pair_terms(micro)
            for key, value in self.pair_sums(terms).items():
                sums[key] = sums[key] + value if key in sums else value
            loss = terms["losses"].sum()
            return loss if rpo_weight is None else loss + rpo_weight * terms["chosen_nll"]

        loss_sum = self.backward_each(micro_batches, loss_fn, scale)
        self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            for key, value in sums.items():
                if key != "loss_sum":  # each rank's share of the step's mean; the mean over ranks is the mean
                    self.trainer.record_metric(f"train/{key}", value * scale, ReduceType.mean)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Summed loss and metrics over the batch's pairs, the pairs, and the RPO term's NLL and tokens."""
        self.model.eval()
        totals: dict[str, torch.Tensor] = {}
        for micro in self.micro_batches(batch):
            terms = self.pair_terms(micro)
            sums = self.pair_sums(terms)
            sums.update(pairs=terms["real"].sum(), chosen_nll=terms["chosen_nll"], chosen_tokens=terms["chosen_tokens"])
            for key, value in sums.items():
                value = value.double()
                totals[key] = totals[key] + value if key in totals else value
        return totals

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The mean over pairs of the loss and of each metric, under TRL's names."""
        pairs = max(totals["pairs"], 1.0)
        metrics = {key: totals[key] / pairs for key in PAIR_SUMS if key != "loss_sum"}
        loss = totals["loss_sum"] / pairs
        if self.rpo_alpha:
            loss += self.rpo_alpha * totals["chosen_nll"] / max(totals["chosen_tokens"], 1.0)
        return {"loss": loss, **metrics}

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """The policy's forward and backward (6 per weight per token), plus the reference's forward (2) unless its
        log-probs were precomputed."""
        flops = LMTrainModule.num_flops_per_token(self, seq_len)  # type: ignore[arg-type]
        if flops is None or self.reference == "precompute":
            return flops
        return flops * 8 // 6


def pair_logps(
    model: torch.nn.Module,
    micro: dict[str, torch.Tensor],
    collator: Any,
    *,
    autocast: Any = contextlib.nullcontext,
    chunked: bool = True,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``completion_logps`` of the micro-batch's pairs under a forward of ``model`` (under ``autocast()``): with
    ``packed``, its real tokens in one row under the pair attention (``enable_pair_attention`` done on
    ``model``); with ``chunked``, from chunks of the completion positions inside the forward
    (``honing.chunked_ce``), where the model allows it."""
    targets = micro["targets"]
    if packed:
        inputs = collator.packed_model_inputs(micro)

        def unpack(packed_output: torch.Tensor) -> torch.Tensor:
            return collator.unpack(micro, packed_output)
    else:
        inputs = collator.model_inputs(micro)

        def unpack(packed_output: torch.Tensor) -> torch.Tensor:
            return packed_output

    def run_forward() -> Any:
        with autocast():
            return model(**inputs, use_cache=False)

    if chunked:
        logps = forward_with_head(
            model,
            lambda hidden, weight, bias: chunked_ce.completion_logps(unpack(hidden), weight, bias, targets)[0],
            run_forward,
        )
        if logps is not None:
            return logps, (targets != IGNORE_INDEX).sum(1)
    return completion_logps(unpack(run_forward().logits), targets)


@torch.no_grad()
def compute_reference_logps(
    model: torch.nn.Module,
    batches: Any,
    *,
    collator: Any,
    device: torch.device,
    autocast: Any,
    chunked: bool = True,
    packed: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probs of every pair's chosen and rejected completion under ``model`` (in eval mode), batch by batch
    in order: the ``precompute`` reference, computed once before training (``packed``: in packed rows, where
    the model's attention allows it)."""
    packed = packed and enable_pair_attention(model)
    inner = unwrap_model(model)
    was_training = inner.training
    inner.eval()
    chosen, rejected = [], []
    try:
        for batch in batches:
            for micro in collator.split(batch, len(batch["input_ids"])):  # one micro-batch: cut to its width
                micro = {key: value.to(device) for key, value in micro.items()}
                logps, _ = pair_logps(model, micro, collator, autocast=autocast, chunked=chunked, packed=packed)
                chosen.append(logps[:, 0].double().cpu())
                rejected.append(logps[:, 1].double().cpu())
    finally:
        inner.train(was_training)
        # FSDP2 keeps the root's weights gathered after a forward without backward; the optimizer, built next,
        # must see the sharded parameters
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.reshard()
    return torch.cat(chosen), torch.cat(rejected)
