"""The ``tokenizer`` section's ``special_tokens`` and ``added_tokens`` applied to a built tokenizer (axolotl's
``special_tokens`` / ``tokens``): the model builder grows the embeddings to the tokenizer's new length."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from honing.distributed import is_rank0

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from honing.config.data_schema import TokenizerSection

log = logging.getLogger(__name__)


def apply_token_settings(tokenizer: PreTrainedTokenizerBase, tokenizer_cfg: TokenizerSection) -> int:
    """Set ``tokenizer_cfg.special_tokens`` (bos / eos / unk / pad by text) and add ``tokenizer_cfg.added_tokens`` on
    ``tokenizer``; return how many tokens the vocabulary gained (0 when every text was already the tokenizer's)."""
    from tokenizers import AddedToken

    special = dict(getattr(tokenizer_cfg, "special_tokens", None) or {})
    added = list(getattr(tokenizer_cfg, "added_tokens", None) or [])
    if not special and not added:
        return 0
    before = len(tokenizer)
    # normalized=False, no stripping: the token matches the raw text, as axolotl adds them
    changed = {
        name: AddedToken(text, rstrip=False, lstrip=False, normalized=False, special=True)
        for name, text in special.items()
        if str(getattr(tokenizer, name, None)) != text
    }
    if changed:
        tokenizer.add_special_tokens(changed)
    vocab = tokenizer.get_vocab()
    new = [AddedToken(text, rstrip=False, lstrip=False, normalized=False) for text in added if text not in vocab]
    if new:
        tokenizer.add_tokens(new)
    grown = len(tokenizer) - before
    if (changed or grown) and is_rank0():
        log.info(
            "tokenizer: %s set, %d token(s) added to the vocabulary (the embeddings grow to %d rows)",
            ", ".join(f"{name}={text!r}" for name, text in special.items() if name in changed) or "no special token",
            grown,
            len(tokenizer),
        )
    return grown
