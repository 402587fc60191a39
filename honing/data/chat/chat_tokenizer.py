"""The tokenizer of chat methods (SFT, DPO, GRPO): byte-level or pretrained, with the run's chat template."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from honing.data.chat.conversation import ensure_special_tokens, own_template, resolve_chat_template
from honing.data.special_tokens import apply_token_settings
from honing.data.tokenizer import build_tokenizer, tokenizer_kind
from honing.errors import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import DataSection, TokenizerSection
    from honing.config.model_schema import ModelSection

log = logging.getLogger(__name__)


def chat_tokenizer(
    tokenizer_cfg: TokenizerSection, data: DataSection, model: ModelSection
) -> tuple[PreTrainedTokenizerBase, str]:
    """The tokenizer the ``tokenizer`` section names (its ``special_tokens`` / ``added_tokens`` applied), with
    ``data.chat_template`` (and its special tokens) set on it so checkpoints and exports save it; and the template's
    text."""
    kind, path = tokenizer_kind(tokenizer_cfg, model.name_or_path)
    if kind in ("char", "bpe"):
        raise DataError(
            f"tokenizer.kind {kind!r} trains on plain text; fine-tuning needs a byte-level or pretrained tokenizer"
        )
    tokenizer = build_tokenizer(kind, path=path, trust_remote_code=tokenizer_cfg.trust_remote_code)
    apply_token_settings(tokenizer, tokenizer_cfg)  # before the template's own tokens: it may name them
    name, fallback = data.chat_template, data.chat_template_fallback
    if name is None and fallback is not None and own_template(tokenizer) is None:
        name = fallback
        log.info("the tokenizer has no chat template of its own: rendering with %r (data.chat_template_fallback)", name)
    chat_template = resolve_chat_template(tokenizer, name)
    ensure_special_tokens(tokenizer, name or chat_template)
    tokenizer.chat_template = chat_template  # saved with the tokenizer in checkpoints and exports
    return tokenizer, chat_template
