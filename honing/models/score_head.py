"""A reward model: transformers' sequence-classification model with one label on a causal LM's body, built from the
run's ``model`` section, and the per-position scores of its head for a loss that picks its own positions.

transformers' ``<Family>ForSequenceClassification`` puts a linear ``score`` head (hidden → 1) on the decoder and
returns the score at each row's last non-pad token; a pair row (prompt, chosen, rejected) holds two sequences, so
the reward step reads the head's output at every position (``position_scores``) and takes each sequence's end.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.wrappers import transformers_model

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

    from honing.config.model_schema import LoraSection
    from honing.models.builder import ModelBuilder
    from honing.models.lora import LoraSettings

#: peft's task type for a sequence classifier: its ``score`` head is trained whole and saved with the adapter
SEQUENCE_CLASSIFICATION = "SEQ_CLS"


class OneLabelClassifier:
    """transformers' ``AutoModelForSequenceClassification`` with ``num_labels=1`` (the model builder's auto class)."""

    @staticmethod
    def from_pretrained(*args: object, **kwargs: object) -> nn.Module:
        """A pretrained body (a causal LM's checkpoint, or an exported reward model) under a one-label head."""
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification.from_pretrained(*args, num_labels=1, **kwargs)

    @staticmethod
    def from_config(config: PretrainedConfig, **kwargs: object) -> nn.Module:
        """A randomly initialised one-label classifier of ``config``'s architecture."""
        from transformers import AutoModelForSequenceClassification

        config.num_labels = 1
        return AutoModelForSequenceClassification.from_config(config, **kwargs)


def build_reward_model(
    builder: ModelBuilder, tokenizer: PreTrainedTokenizerBase, *, max_length: int, shards: int
) -> nn.Module:
    """The one-label classifier ``builder``'s ``model`` section describes (a checkpoint, or a config sized to
    ``tokenizer`` and ``max_length``), finished as any model (embeddings, device, attention, LoRA whose task type is
    ``SEQ_CLS``: the new head trains whole), with the tokenizer's pad token id in its config (transformers' scoring
    of a padded batch reads it)."""
    cfg = builder.cfg
    if cfg.quantize is not None:
        raise ConfigError("model.quantize: method 'reward' trains a new score head; QLoRA is not supported for it")
    if cfg.name_or_path:
        model = builder.load_pretrained(shards=shards, auto_class=OneLabelClassifier)
    else:
        model = OneLabelClassifier.from_config(
            builder.sized_config(tokenizer, max_length=max_length),
            attn_implementation=builder.attention_to_build(),
            dtype=builder.dtype(),
        )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return builder.finish(model, tokenizer, lora=reward_lora(cfg.lora), shards=shards)


def reward_lora(lora: LoraSection | None) -> LoraSettings | None:
    """``model.lora`` with peft's sequence-classification task type (a causal LM's would freeze the new head; the
    method's key table refuses any other)."""
    if lora is None:
        return None
    keys = {name: getattr(lora, name) for name in type(lora).model_fields}  # each key read where it is used
    return SimpleNamespace(**{**keys, "task_type": SEQUENCE_CLASSIFICATION})


def score_module(model: nn.Module) -> nn.Module:
    """The classifier's ``score`` head (peft's trainable copy wrapper under LoRA)."""
    head = getattr(transformers_model(model), "score", None)
    if not isinstance(head, nn.Module):
        raise ConfigError(f"{type(transformers_model(model)).__name__} has no 'score' head: not a sequence classifier")
    return head


def position_scores(model: nn.Module, run_forward: Callable[[], Any]) -> torch.Tensor:
    """The score head's output at every position ``[rows, tokens]`` during ``run_forward()`` (a call of the root
    forward, so FSDP2's and peft's hooks run as for any forward)."""
    captured: list[torch.Tensor] = []
    handle = score_module(model).register_forward_hook(lambda module, args, output: captured.append(output))
    try:
        run_forward()
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"the score head ran {len(captured)} times in one forward; expected once")
    return captured[0].squeeze(-1)
