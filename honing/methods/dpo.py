"""DPO's TrainModule: the pair step (``honing.methods.pairs``) with the DPO loss part against a frozen reference,
and the reference's log-probs computed once before training (``dpo.reference: precompute``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.distributed.fsdp import FSDPModule

from honing.methods.dpo_token_terms import length_desensitized, with_tail_targets
from honing.methods.pair_losses import DPOLoss
from honing.methods.pairs import PairTrainModule, pair_scores
from honing.models.pair_attention import enable_pair_attention
from honing.models.wrappers import unwrap_model

__all__ = ["DPOTrainModule", "compute_reference_logps"]


#: the keyword arguments of ``DPOTrainModule`` that are the loss's settings (``DPOLoss``'s fields, the ``dpo``
#: section's keys of the same names)
DPO_LOSS_SETTINGS = tuple(field.name for field in dataclasses.fields(DPOLoss))


class DPOTrainModule(PairTrainModule):
    """The mean over the step's pairs of the DPO loss (+ the weight of ``sft`` and ``rpo_alpha`` times the chosen
    completions' token-mean negative log-likelihood) against ``reference``: the pair step with ``DPOLoss`` (built
    from the ``DPO_LOSS_SETTINGS`` among ``options``) as its loss part."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        reference: str = "copy",
        reference_model: torch.nn.Module | None = None,
        **options: Any,
    ):
        loss = DPOLoss(**{name: options.pop(name) for name in DPO_LOSS_SETTINGS if name in options})
        super().__init__(model, optimizer, loss=loss, reference=reference, reference_model=reference_model, **options)


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
    ld_alpha: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probs of every pair's chosen and rejected completion under ``model`` (in eval mode), batch by batch
    in order: the ``precompute`` reference, computed once before training (``packed``: in packed rows, where
    the model's attention allows it; ``ld_alpha``: LD-DPO's, the tail past the shorter reply weighted by it)."""
    packed = packed and enable_pair_attention(model)
    inner = unwrap_model(model)
    was_training = inner.training
    inner.eval()
    chosen, rejected = [], []
    try:
        for batch in batches:
            for micro in collator.split(batch, len(batch["input_ids"])):  # one micro-batch: cut to its width
                micro = {key: value.to(device) for key, value in micro.items()}
                if ld_alpha is not None:
                    micro = with_tail_targets(micro)
                logps, _, _ = pair_scores(model, micro, collator, autocast=autocast, chunked=chunked, packed=packed)
                if ld_alpha is not None:
                    logps = length_desensitized(logps[:, :2], logps[:, 2:4], ld_alpha)
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
