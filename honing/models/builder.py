"""The model builder: a run's model from its ``model`` section, on its device and dtype, with the attention kernel
chosen for it, a quantized base (QLoRA) and LoRA adapters: the part of every recipe that makes the model."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from honing.errors import ConfigError
from honing.models.attention_choice import AUTO, AttentionChoice, check_attention_available, choose_attention
from honing.models.config_overrides import apply_config_overrides
from honing.models.lean_training_forward import use_lean_forwards
from honing.models.loading import (
    ModelClass,
    auto_model_class,
    build_model_config,
    build_model_from_config,
    load_pretrained_model,
)
from honing.models.lora import LoraSettings, apply_lora, lora_keywords
from honing.models.model_shape import pretrained_config
from honing.models.quantize import check_has_lora, quantize_base
from honing.models.quantized_loading import load_quantized_pretrained

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

    from honing.config.model_schema import ModelSection

log = logging.getLogger(__name__)


class ModelBuilder:
    """Builds the model ``model`` (the run's ``model`` section) describes; keeps the attention kernel it chose."""

    def __init__(
        self,
        model: ModelSection,
        *,
        device: torch.device,
        precision: str,
        packed_rows: bool = False,
        disable_dropout: bool | None = None,
    ):
        self.cfg, self.device, self.precision, self.packed_rows = model, device, precision, packed_rows
        # the method's default resolved by the recipe (``config.methods.dropout_disabled``); None: the key's value
        self.disable_dropout = bool(model.disable_dropout if disable_dropout is None else disable_dropout)
        check_attention_available(model.attn_implementation, device_type=device.type)  # before any model is read
        self.attention: AttentionChoice | None = None  # set once the model exists

    def dtype(self) -> torch.dtype:
        """``model.dtype``, else bf16 weights under ``precision: bf16`` and fp32 otherwise."""
        if self.cfg.dtype is not None:
            return getattr(torch, self.cfg.dtype)
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    def causal_lm(self, tokenizer: PreTrainedTokenizerBase, *, max_length: int, shards: int) -> torch.nn.Module:
        """A causal LM from ``model.name_or_path`` or ``model.config`` (sized to ``tokenizer`` and ``max_length``),
        finished by :meth:`finish`."""
        cfg = self.cfg
        check_has_lora(cfg.quantize, cfg.lora)  # before a long load that would be refused
        if cfg.name_or_path:
            model = self.load_pretrained(shards=shards)
        else:
            model = build_model_from_config(
                self.sized_config(tokenizer, max_length=max_length),
                attn_implementation=self.attention_to_build(),
                dtype=self.dtype(),
            )
        return self.finish(model, tokenizer, lora=cfg.lora, shards=shards)

    def sized_config(self, tokenizer: PreTrainedTokenizerBase, *, max_length: int) -> PretrainedConfig:
        """The transformers config of ``model.config`` for a new model: its vocabulary and special token ids the
        tokenizer's, ``max_length`` positions."""
        return build_model_config(
            self.cfg.config or {},
            vocab_size=len(tokenizer),
            max_position_embeddings=max_length,
            special_token_ids={
                "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id,
                "bos_token_id": tokenizer.bos_token_id,
            },
        )

    def overridden_config(self) -> PretrainedConfig:
        """``model.name_or_path``'s config (read whole, not its offline shape) with ``model.config_overrides``."""
        cfg = self.cfg
        config = pretrained_config(
            cfg.name_or_path, shape=cfg.shape, trust_remote_code=cfg.trust_remote_code, use_shape_offline=False
        )
        return apply_config_overrides(config, cfg.config_overrides)

    def load_pretrained(self, *, shards: int, auto_class: ModelClass | None = None) -> torch.nn.Module:
        """``model.name_or_path`` in the run's dtype (``auto_class``: transformers' Auto class, None for a causal
        LM); under ``model.quantize`` the decoder's linears are quantized as they are read."""
        cfg = self.cfg
        overrides, load_kwargs = cfg.config_overrides, cfg.load_kwargs
        # what the model is built with, whichever way it is built
        built = dict(
            attn_implementation=self.attention_to_build(), dtype=self.dtype(), trust_remote_code=cfg.trust_remote_code
        )
        if not cfg.pretrained_weights:  # the architecture alone: its config read, its weights random
            config = self.overridden_config()
            log.info("model.pretrained_weights: false: %s's architecture with random weights", cfg.name_or_path)
            return (auto_class or auto_model_class(config)).from_config(config, **built)
        if cfg.quantize is not None:  # QLoRA's base, quantized shard by shard as it is read
            if overrides or load_kwargs:
                given = "config_overrides" if overrides else "load_kwargs"
                raise ConfigError(f"model.{given}: not yet with model.quantize (a quantized base reads its own config)")
            return load_quantized_pretrained(
                cfg.name_or_path,
                cfg.quantize,
                **built,
                auto_class=auto_class,
                device=self.device,
                shards=shards,
                shape=cfg.shape,
                skip_modules=cfg.quantize_skip_modules,
            )
        config = None
        if overrides:
            config = self.overridden_config()
            log.info("model.config_overrides: %s", ", ".join(sorted(overrides)))
        return load_pretrained_model(
            cfg.name_or_path,
            **built,
            auto_class=auto_class,
            shape=cfg.shape,
            config=config,
            load_kwargs=load_kwargs,
        )

    def finish(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase | None,
        *,
        lora: LoraSettings | None,
        shards: int,
    ) -> torch.nn.Module:
        """Embeddings grown to the tokenizer, the base quantized (QLoRA), the model on the device with its attention
        kernel, then LoRA adapters (``lora``: a ``model.lora`` section, or None)."""
        rows = model.get_input_embeddings().weight.shape[0]
        if tokenizer is not None and len(tokenizer) > rows:
            # e.g. chat-template special tokens added to a pretrained tokenizer: the new rows are
            # initialised by transformers (mean of the old embeddings) and trained
            log.info("resizing the model's embeddings from %d to %d tokens to fit the tokenizer", rows, len(tokenizer))
            model.resize_token_embeddings(len(tokenizer))
            if lora is not None and not any("embed" in name for name in lora.modules_to_save or ()):
                # axolotl refuses this (lora_modules_to_save); here the run goes on, told once
                log.warning(
                    "the tokenizer gained %d token(s) but LoRA trains no embedding: their vectors keep their initial "
                    "values; add embed_tokens and lm_head to model.lora.modules_to_save to train them",
                    len(tokenizer) - rows,
                )
        if self.disable_dropout:  # before LoRA, whose adapters keep model.lora.dropout
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        quantize_base(  # QLoRA's base
            model,
            self.cfg.quantize,
            lora,
            device=self.device,
            shards=shards,
            skip_modules=self.cfg.quantize_skip_modules,
        )
        model = self.set_attention(model.to(self.device))
        if lora is not None:  # peft creates the adapters on the device of the layers they adapt
            model = apply_lora(model, **lora_keywords(lora))
        if self.cfg.lean_forward:
            use_lean_forwards(model)
        return model

    def attention_to_build(self) -> str | None:
        """The attention implementation to build the model with: the configured one; sdpa for ``auto``, which
        :meth:`set_attention` resolves once the model exists."""
        requested = self.cfg.attn_implementation
        return "sdpa" if requested == AUTO else requested

    def set_attention(self, model: torch.nn.Module) -> torch.nn.Module:
        """Resolve ``model.attn_implementation`` for this model, device and row layout (``auto``: see
        ``honing.models.attention_choice``), switch the model to it, and keep the choice in ``self.attention``."""
        self.attention = choose_attention(
            self.cfg.attn_implementation,
            device_type=self.device.type,
            packed_rows=self.packed_rows,
            precision=self.precision,
            supports_flash=bool(getattr(model, "_supports_flash_attn", False)),
            supports_flex=bool(getattr(model, "_supports_flex_attn", False)),
        )
        requested = self.cfg.attn_implementation
        if requested == AUTO and self.attention.name != self.attention_to_build():
            model.set_attn_implementation(self.attention.name)
        elif requested != AUTO:  # what transformers made of it (None: its own default)
            config = getattr(model, "config", None)
            self.attention = AttentionChoice(str(getattr(config, "_attn_implementation", None) or requested))
        return model

    def attention_name(self) -> str:
        """The attention implementation in use (the configured name until the model is built)."""
        return self.attention.name if self.attention else str(self.cfg.attn_implementation or "sdpa")

    def describe_attention(self) -> str:
        """The attention implementation in use, with why when ``auto`` picked it."""
        reason = self.attention.reason if self.attention else ""
        return f"{self.attention_name()} ({reason})" if reason else self.attention_name()
