"""Which attention kernel a recipe's model runs, and the collator packed rows need for it: a part of ``Recipe``."""

from __future__ import annotations

from typing import Any

import torch

from honing.data.collate import Collator, VarlenCollator, stack_collate
from honing.models.attention_choice import AUTO, AttentionChoice, choose_attention, is_flash


class AttentionSetup:
    """``model.attn_implementation`` resolved for the model, device and row layout (``Recipe`` inherits it)."""

    config: Any
    device: torch.device
    precision: str
    attention: AttentionChoice | None

    def packed_rows(self) -> bool:
        """Whether training rows hold several documents told apart by restarting ``position_ids`` (those are
        what ``model.attn_implementation: auto`` picks a varlen kernel for on CUDA)."""
        return False

    def packed_collator(self) -> Collator:
        """The collator of packed rows: stacked, or laid end to end per micro-batch under flash attention
        (whose varlen path reads documents from position_ids only in a batch of one row)."""
        if self.attention is not None and is_flash(self.attention.name):
            return VarlenCollator()
        return stack_collate

    def attention_to_build(self) -> str | None:
        """The attention implementation to build the model with: the configured one; sdpa for ``auto``, which
        :meth:`set_attention` resolves once the model exists."""
        requested = self.config.model.attn_implementation
        return "sdpa" if requested == AUTO else requested

    def set_attention(self, model: torch.nn.Module) -> torch.nn.Module:
        """Resolve ``model.attn_implementation`` for this model, device and row layout (``auto``: see
        ``honing.models.attention_choice``), switch the model to it, and keep the choice in ``self.attention``."""
        self.attention = choose_attention(
            self.config.model.attn_implementation,
            device_type=self.device.type,
            packed_rows=self.packed_rows(),
            precision=self.precision,
            supports_flash=bool(getattr(model, "_supports_flash_attn", False)),
            supports_flex=bool(getattr(model, "_supports_flex_attn", False)),
        )
        requested = self.config.model.attn_implementation
        if requested == AUTO and self.attention.name != self.attention_to_build():
            model.set_attn_implementation(self.attention.name)
        elif requested != AUTO:  # what transformers made of it (None: its own default)
            config = getattr(model, "config", None)
            self.attention = AttentionChoice(str(getattr(config, "_attn_implementation", None) or requested))
        return model

    def attention_name(self) -> str:
        """The attention implementation in use (the configured name until the model is built)."""
        return self.attention.name if self.attention else str(self.config.model.attn_implementation or "sdpa")

    def describe_attention(self) -> str:
        """The attention implementation in use, with why when ``auto`` picked it."""
        reason = self.attention.reason if self.attention else ""
        return f"{self.attention_name()} ({reason})" if reason else self.attention_name()
