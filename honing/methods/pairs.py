"""The pair step: chosen and rejected scored in one forward, trained with a pair loss part (DPO, ORPO, CPO / SimPO:
``honing.methods.pair_losses``), against a reference only where the part uses one; TRL's metric names."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput

from honing import chunked_ce
from honing.data.collate import Collator
from honing.errors import ConfigError
from honing.losses import IGNORE_INDEX, completion_logps
from honing.methods.base import BaseTrainModule
from honing.methods.dpo_token_terms import square_sums_from_hidden, square_sums_from_logits
from honing.methods.lm import LMTrainModule
from honing.methods.pair_losses import PairLoss
from honing.methods.reference_cache import ReferenceCache, row_keys
from honing.models.output_head import forward_with_head
from honing.models.pair_attention import enable_pair_attention
from honing.models.wrappers import is_lora, unwrap_model
from honing.train.metrics import ReduceType

#: where the reference's log-probs come from: a frozen copy, the LoRA model with its adapters off, the batch
#: (precomputed), or a per-row cache filled as batches first hold each row (``lazy``); ``none`` for a loss that uses
#: no reference
REFERENCE_MODES = ("none", "copy", "adapters_off", "precompute", "lazy")
#: per-pair sums every step or evaluation adds up (``pairs`` counts them); metrics are their means over pairs
PAIR_SUMS = (
    "loss_sum",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


class PairTrainModule(BaseTrainModule):
    """The mean over the step's pairs of ``loss``'s pair loss, plus its NLL weight times the chosen sequences'
    token-mean negative log-likelihood, whatever the split of the step into ranks and micro-batches."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loss: PairLoss,
        reference: str = "none",
        reference_model: torch.nn.Module | None = None,
        reference_cache: ReferenceCache | None = None,
        chunked_loss: bool = True,
        packed_pairs: bool = True,
        **options: Any,
    ):
        super().__init__(model, optimizer, **options)
        self.loss = loss
        self.chunked_loss = chunked_loss
        where = f"{loss.section}.reference"
        if reference not in REFERENCE_MODES:
            raise ConfigError(f"{where}: expected one of {', '.join(REFERENCE_MODES[1:])}, got {reference!r}")
        if loss.uses_reference == (reference == "none"):
            needed = "a reference" if loss.uses_reference else "no reference"
            raise ConfigError(f"{where}: {type(loss).__name__} uses {needed}; got {reference!r}")
        if reference == "copy" and reference_model is None:
            raise ConfigError(f"{where} 'copy' needs a reference model")
        if reference == "adapters_off" and not is_lora(model):
            raise ConfigError(f"{where} 'adapters_off' needs a LoRA model (model.lora); use copy or precompute")
        if reference == "lazy" and reference_model is None and not is_lora(model):
            raise ConfigError(f"{where} 'lazy' needs a reference model, or a LoRA model to score with its adapters off")
        self.reference = reference
        self.reference_model = reference_model
        # lazy: each row's log-probs from the first batch that held it (in memory only when no store is given)
        self.reference_cache = reference_cache if reference_cache is not None else ReferenceCache()
        # a step's pairs in one row without padding, attended pair by pair (honing.models.pair_attention)
        models = [model] if reference_model is None else [model, reference_model]
        self.packed_pairs = packed_pairs and all(enable_pair_attention(m) for m in models)
        #: ``pair_scores`` of a model's forward over a micro-batch with this module's collator, autocast, chunked head
        #: and packing: what the policy, the reference and KTO's step score pairs with
        self.score_pairs = partial(
            pair_scores,
            collator=self.collator,
            autocast=self.autocast,
            chunked=self.chunked_loss,
            packed=self.packed_pairs,
        )

    # --- the maths ------------------------------------------------------------------------------
    def reference_logps(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's log-probs of each pair's chosen and rejected completion."""
        if self.reference == "lazy":
            return self.lazy_reference_logps(micro)
        if "ref_chosen_logps" in micro:
            return micro["ref_chosen_logps"], micro["ref_rejected_logps"]
        if self.reference == "precompute":
            raise RuntimeError("dpo.reference is 'precompute' but the batch carries no reference log-probs")
        return self.score_reference(micro)

    def score_reference(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward of the reference (the copy, or the policy with its adapters off) over the micro-batch."""
        with torch.no_grad(), self._reference_context() as model:
            logps, _, _ = self.score_pairs(model, micro)
        return self.loss.sequence_logps(logps).unbind(1)

    def lazy_reference_logps(self, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached log-probs of the micro-batch's rows (``with_cached_reference``); where a row has none yet, the
        reference scores the whole micro-batch once and its new rows are kept, so a row's reference is the value
        from the first batch that held it, in every later epoch and resumed run."""
        chosen, rejected = micro["ref_chosen_logps"], micro["ref_rejected_logps"]
        missing = torch.isnan(chosen)
        needed = missing.any().to(torch.int64)
        if self.ranks.dp_size > 1:  # a sharded reference's forward is collective: all ranks run it, or none
            needed = self.ranks.sum(needed)
        if not bool(needed):
            return chosen, rejected
        scored_chosen, scored_rejected = self.score_reference(micro)
        keys = [bytes(row) for row in micro["reference_keys"].cpu().numpy()]
        self.reference_cache.store(keys, scored_chosen, scored_rejected)
        # rows held before keep their first value (computed in another batch: equal, but maybe not to the last bit)
        return (
            torch.where(missing, scored_chosen.to(chosen.dtype), chosen),
            torch.where(missing, scored_rejected.to(rejected.dtype), rejected),
        )

    def with_cached_reference(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` with each row's cached reference log-probs (NaN where none is cached yet) and its row key."""
        keys = row_keys(batch)
        chosen, rejected = self.reference_cache.lookup(keys)
        key_bytes = torch.frombuffer(bytearray(b"".join(keys)), dtype=torch.uint8).reshape(len(keys), -1)
        return {**batch, "ref_chosen_logps": chosen, "ref_rejected_logps": rejected, "reference_keys": key_bytes}

    @contextlib.contextmanager
    def _reference_context(self) -> Iterator[torch.nn.Module]:
        if self.reference_model is not None or self.reference not in ("adapters_off", "lazy"):
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
        """Per-pair losses, log-probs and metrics of one micro-batch (one policy forward for chosen and rejected),
        and the chosen sequences' summed negative log-likelihood and token count (the NLL term)."""
        logps, lengths, square_sums = self.score_pairs(self.model, micro, square_sums=self.loss.needs_square_sums)
        reference = self.reference_logps(micro) if self.loss.uses_reference else None
        options = {"square_sums": square_sums} if square_sums is not None else {}
        terms = self.loss.terms(logps, lengths, reference, **options)
        chosen_nll, chosen_tokens = -logps[:, 0].sum(), lengths[:, 0].sum()
        if self.loss.nll_on_prompt:  # the third column: the prompt's own next tokens (with_prompt_targets)
            chosen_nll, chosen_tokens = chosen_nll - logps[:, 2].sum(), chosen_tokens + lengths[:, 2].sum()
        terms.update(
            chosen_nll=chosen_nll,
            chosen_tokens=chosen_tokens,
            real=(lengths[:, 0] > 0).to(logps.dtype),  # a filler pair has no completion tokens
        )
        return terms

    def pair_sums(self, terms: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The micro-batch's sums over its real pairs of the loss and of each metric (TRL's names)."""
        real = terms["real"] > 0

        def total(values: torch.Tensor) -> torch.Tensor:  # a filler pair's values may be NaN (ORPO's log 0)
            return torch.where(real, values, 0.0).sum()

        chosen_rewards, rejected_rewards = terms["chosen_rewards"], terms["rejected_rewards"]
        sums = {
            "loss_sum": total(terms["losses"].detach()),
            "rewards/chosen": total(chosen_rewards),
            "rewards/rejected": total(rejected_rewards),
            "rewards/accuracies": total((chosen_rewards > rejected_rewards).to(terms["real"].dtype)),
            "rewards/margins": total(chosen_rewards - rejected_rewards),
            "logps/chosen": total(terms["chosen"].detach()),
            "logps/rejected": total(terms["rejected"].detach()),
        }
        sums.update({name: total(terms[name]) for name in self.loss.extra_metrics})
        return sums

    def micro_batches(self, batch: Any) -> list[dict[str, torch.Tensor]]:
        """The collator's micro-batches (with the lazy reference's cached log-probs), with the target columns the
        loss reads besides the replies' (with a loss whose NLL covers the prompt, its column)."""
        if self.reference == "lazy":
            batch = self.with_cached_reference(batch)
        micro_batches = [self.loss.with_targets(m) for m in super().micro_batches(batch)]
        return [with_prompt_targets(m) for m in micro_batches] if self.loss.nll_on_prompt else micro_batches

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Each micro-batch contributes Σ pair losses / (pairs of the whole step, over all ranks), plus the NLL
        term's share: its chosen NLL / (chosen tokens of the whole step)."""
        self.start_step()
        micro_batches = self.micro_batches(batch)
        local_pairs = torch.tensor(sum(m["input_ids"].shape[0] for m in micro_batches), device=self.device)
        step_pairs = self.ranks.sum(local_pairs).clamp(min=1)
        # times the world size because DDP / FSDP average gradients over ranks (as in LMTrainModule)
        scale = self.ranks.grad_divisor / step_pairs
        nll_weight, step_tokens = None, None
        if self.loss.nll_weight or self.loss.reports_nll:
            step_tokens = self.ranks.sum(sum(nll_token_count(m, self.loss.nll_on_prompt) for m in micro_batches)).clamp(
                min=1
            )
            if self.loss.nll_weight:
                nll_weight = self.loss.nll_weight * step_pairs / step_tokens
        sums: dict[str, torch.Tensor] = {}

        def loss_fn(micro: dict[str, torch.Tensor]) -> torch.Tensor:
            terms = self.pair_terms(micro)
            for key, value in (*self.pair_sums(terms).items(), ("nll", terms["chosen_nll"].detach())):
                sums[key] = sums[key] + value if key in sums else value
            loss = terms["losses"].sum()
            return loss if nll_weight is None else loss + nll_weight * terms["chosen_nll"]

        loss_sum = self.backward_each(micro_batches, loss_fn, scale)
        self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            nll = sums.pop("nll")
            for key, value in sums.items():
                if key != "loss_sum":  # each rank's share of the step's mean; the mean over ranks is the mean
                    self.trainer.record_metric(f"train/{key}", value * scale, ReduceType.mean)
            if step_tokens is not None and self.loss.reports_nll:
                nll_loss = nll * self.ranks.grad_divisor / step_tokens
                self.trainer.record_metric("train/nll_loss", nll_loss, ReduceType.mean)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Summed loss and metrics over the batch's pairs, the pairs, and the NLL term's NLL and tokens."""
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
        names = (*PAIR_SUMS, *self.loss.extra_metrics)
        metrics = {key: totals[key] / pairs for key in names if key != "loss_sum"}
        loss = totals["loss_sum"] / pairs
        if self.loss.nll_weight:
            loss += self.loss.nll_weight * totals["chosen_nll"] / max(totals["chosen_tokens"], 1.0)
        if self.loss.reports_nll:
            metrics["nll_loss"] = totals["chosen_nll"] / max(totals["chosen_tokens"], 1.0)
        return {"loss": loss, **metrics}

    def num_flops_per_token(self, seq_len: int) -> int | None:
        """The policy's forward and backward (6 per weight per token), plus the reference's forward (2) where one
        runs every step."""
        flops = LMTrainModule.num_flops_per_token(self, seq_len)  # type: ignore[arg-type]
        if flops is None or self.reference in ("none", "precompute"):
            return flops
        return flops * 8 // 6


def nll_token_count(micro: dict[str, torch.Tensor], with_prompt: bool = False) -> torch.Tensor:
    """The tokens the NLL term is over: the chosen reply's (column 0), and with ``with_prompt`` the prompt's (the
    third column, ``with_prompt_targets``)."""
    targets = micro["targets"]
    count = (targets[..., 0] != IGNORE_INDEX).sum()
    return count + (targets[..., 2] != IGNORE_INDEX).sum() if with_prompt else count


def with_prompt_targets(micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``micro`` with a third column of ``targets``: at each prompt position but the last, the prompt's next token,
    so that one forward scores the chosen sequence whole (prompt and reply), as TRL's ORPO NLL does."""
    targets, input_ids = micro["targets"], micro["input_ids"]
    index = torch.arange(input_ids.shape[1], device=input_ids.device)
    prompt = micro["segments"][:, :1].to(input_ids.device)
    scored = (targets[..., 0] != IGNORE_INDEX).any(1, keepdim=True)  # a filler row scores nothing
    following = F.pad(input_ids[:, 1:], (0, 1), value=IGNORE_INDEX)
    column = torch.where((index < prompt - 1) & scored, following, IGNORE_INDEX)
    return {**micro, "targets": torch.cat([targets, column[..., None]], dim=-1)}


def pair_scores(
    model: torch.nn.Module,
    micro: dict[str, torch.Tensor],
    collator: Collator,
    *,
    autocast: Callable[[], AbstractContextManager] = contextlib.nullcontext,
    chunked: bool = True,
    packed: bool = False,
    square_sums: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(completion_logps, lengths, square sums)`` of the micro-batch's pairs under a forward of ``model`` (under
    ``autocast()``): with ``packed``, its real tokens in one row under the pair attention (``enable_pair_attention``
    done on ``model``); with ``chunked``, from chunks of the completion positions inside the forward
    (``honing.chunked_ce``), where the model allows it; with ``square_sums`` each completion's sum of log Σ_v p(v)²
    from the same forward (WPO's weights; None without)."""
    targets = micro["targets"]
    sums: list[torch.Tensor] = []
    if packed:
        inputs = collator.packed_model_inputs(micro)

        def unpack(packed_output: torch.Tensor) -> torch.Tensor:
            return collator.unpack(micro, packed_output)
    else:
        inputs = collator.model_inputs(micro)
        # image pairs run their chosen and rejected sequences as rows of their own: the collator lays them side by side
        pair_layout = getattr(collator, "pair_layout", None)

        def unpack(packed_output: torch.Tensor) -> torch.Tensor:
            return packed_output if pair_layout is None else pair_layout(micro, packed_output)

    def run_forward() -> ModelOutput:
        with autocast():
            return model(**inputs, use_cache=False)

    def head(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        hidden = unpack(hidden)
        if square_sums:
            sums.append(square_sums_from_hidden(hidden, weight, bias, targets))
        return chunked_ce.completion_logps(hidden, weight, bias, targets)[0]

    if chunked:
        logps = forward_with_head(model, head, run_forward)
        if logps is not None:
            return logps, (targets != IGNORE_INDEX).sum(1), sums[-1] if sums else None
    logits = unpack(run_forward().logits)
    logps, lengths = completion_logps(logits, targets)
    return logps, lengths, square_sums_from_logits(logits, targets) if square_sums else None
