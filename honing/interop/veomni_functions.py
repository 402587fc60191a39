"""VeOmni's free functions that its document's code calls: ``build_processor(path)`` and
``veomni_clip_grad_norm(model, max_grad_norm)``."""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from honing.errors import ConfigError

#: a BaseTrainer's model -> the trainer, so that ``veomni_clip_grad_norm(self.model, ...)`` clips as the run does
TRAINERS_OF_MODELS: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()


def build_processor(processor_path: str | None, **kwargs: Any) -> Any:
    """VeOmni's ``build_processor(path)``: the model's ``AutoProcessor`` (a tokenizer-only folder gives its
    tokenizer, as transformers' ``AutoProcessor`` does)."""
    if not processor_path:
        raise ConfigError(
            "build_processor: no path; set tokenizer.path or model.name_or_path (args.model.tokenizer_path)"
        )
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(processor_path, **kwargs)
    except (OSError, ValueError) as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"build_processor: cannot load a processor from {processor_path!r}: {reason}") from None


def veomni_clip_grad_norm(model: torch.nn.Module, max_grad_norm: float | None, **kwargs: Any) -> torch.Tensor:
    """VeOmni's ``veomni_clip_grad_norm(model, max_grad_norm)``: the gradients' total norm, clipped to
    ``max_grad_norm`` (None or 0: not clipped). A ``BaseTrainer``'s model is clipped by its trainer
    (``clip_grad_norm``: the whole model's norm however it is sharded, logged as ``optim/grad_norm``)."""
    trainer = TRAINERS_OF_MODELS.get(model)
    if trainer is not None:
        return trainer.clip_grad_norm(max_grad_norm)
    grads = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(grads, max_grad_norm if max_grad_norm else math.inf)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
