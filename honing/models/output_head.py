"""Run a model's own forward with its output head replaced by a function of the final hidden states.

A loss that needs the logits of only some positions, one chunk at a time (``honing.chunked_ce``), gets the hidden
states and the head's weight from inside the root forward: FSDP2's root hooks gather the weights and hook the
backward as for any forward, which a direct call of the decoder and the head would skip. The function's result
comes back as the output's ``logits``; a model that changes its logits after the head (soft-capping, scaling)
would change that result too, so it is detected and served by the plain forward instead.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from honing.models.wrappers import transformers_model

log = logging.getLogger(__name__)

#: ``head_fn(hidden_states, weight, bias)``: what the head computes instead of the logits
HeadFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]

_INEXACT: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models whose forward transforms the head's output


def head_linears(model: nn.Module) -> list[nn.Linear] | None:
    """The plain linear layers the model's output head may call (peft's ``modules_to_save`` copies and their
    original), or None when the head is something else (LoRA on the head, its own FSDP unit, a custom module)."""
    get_output_embeddings = getattr(transformers_model(model), "get_output_embeddings", None)
    head = get_output_embeddings() if callable(get_output_embeddings) else None
    if type(head) is nn.Linear:
        return [head]
    # peft's ModulesToSaveWrapper calls the active adapter's trainable copy, or its original with adapters off
    original, copies = getattr(head, "original_module", None), getattr(head, "modules_to_save", None)
    if isinstance(copies, nn.ModuleDict):
        linears = [original, *copies.values()]
        if all(type(linear) is nn.Linear for linear in linears):
            return linears
    return None


def whole(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """``tensor`` whole on every rank: a head split over vocabulary shards by tensor parallelism is all-gathered
    (vocabulary × hidden per forward, less than gathering the logits as the plain head does; its backward keeps
    this rank's shard of the gradient), so the chunked loss needs no vocabulary-parallel softmax."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def supports_head_fn(model: nn.Module) -> bool:
    """True when ``forward_with_head`` can serve ``model`` (its head is a plain linear layer, and its forward has
    not been found to change the head's output)."""
    return model not in _INEXACT and head_linears(model) is not None


def forward_with_head(model: nn.Module, head_fn: HeadFn, run_forward: Callable[[], Any]) -> torch.Tensor | None:
    """``head_fn(hidden_states, weight, bias)`` computed inside ``run_forward()`` (a call of ``model``'s root
    forward) in place of its output head; None when ``model`` cannot be served this way exactly, and the caller
    runs the plain forward."""
    if model in _INEXACT:
        return None
    linears = head_linears(model)
    if linears is None:
        return None
    results: list[torch.Tensor] = []

    def replaced(linear: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
        def forward(hidden_states: torch.Tensor) -> torch.Tensor:
            result = head_fn(hidden_states, whole(linear.weight), whole(linear.bias))
            results.append(result)
            return result

        return forward

    saved = [linear.__dict__.get("forward") for linear in linears]
    for linear in linears:
        linear.forward = replaced(linear)  # on the instance: the module tree and its hooks stay as they are
    try:
        outputs = run_forward()
    finally:
        for linear, forward in zip(linears, saved):
            if forward is None:
                del linear.forward
            else:
                linear.forward = forward
    logits = getattr(outputs, "logits", None)
    if len(results) == 1 and logits is results[0]:
        return logits
    _INEXACT.add(model)
    log.warning(
        "%s changes its logits after the output head (e.g. soft-capping): its loss is computed from the full "
        "logits; set model.chunked_loss=false to skip this check",
        type(transformers_model(model)).__name__,
    )
    return None
