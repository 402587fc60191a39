"""axolotl's ``special_tokens`` (bos / eos / unk / pad by text) and ``tokens`` (added to the vocabulary) as honing's
``tokenizer.special_tokens`` / ``tokenizer.added_tokens``: applied to the tokenizer as it is built, the embeddings
grown to fit, as axolotl's ``load_tokenizer`` and ``resize_token_embeddings`` do."""

from __future__ import annotations

from honing.interop.configs.translation import Keys, Translation

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def translate_tokens(t: Translation, top: Keys) -> None:
    """``special_tokens`` and ``tokens`` as the tokenizer section's keys; a value that is no text is refused."""
    tokens = top.take("special_tokens")
    if tokens is not None:
        translate_special_tokens(t, top.key("special_tokens"), tokens)
    added = top.take("tokens")
    if added is not None:
        if isinstance(added, list) and added and all(isinstance(token, str) and token for token in added):
            t.set("tokenizer.added_tokens", list(added))
        else:
            t.refuse(top.key("tokens"), f"{added!r}: expected a list of token texts")


def translate_special_tokens(t: Translation, key: str, tokens: object) -> None:
    """Each of axolotl's ``SpecialTokensConfig`` fields set: bos / eos / unk / pad to ``tokenizer.special_tokens``,
    ``additional_special_tokens`` to ``tokenizer.added_tokens`` (kept whole alike; only decoding with
    ``skip_special_tokens`` tells the two apart)."""
    if not isinstance(tokens, dict):
        t.refuse(key, f"{tokens!r}: expected a mapping of bos_token / eos_token / unk_token / pad_token to texts")
        return
    special = {}
    for name, text in tokens.items():
        if text is None:
            continue
        if name == "additional_special_tokens" and isinstance(text, list) and all(isinstance(x, str) for x in text):
            t.set("tokenizer.added_tokens", [*t.get("tokenizer.added_tokens", []), *text])
        elif name not in SPECIAL_TOKEN_NAMES:
            t.refuse(f"{key}.{name}", f"not a field of axolotl's special_tokens ({', '.join(SPECIAL_TOKEN_NAMES)})")
        elif not isinstance(text, str) or not text:
            t.refuse(f"{key}.{name}", f"{text!r}: expected the token's text")
        else:
            special[name] = text
    if special:
        t.set("tokenizer.special_tokens", special)
