"""What the recipes of the pair methods (DPO, ORPO, CPO / SimPO) share: the chat tokenizer's preference row kind,
the attention check, whether pairs are packed, and the held-out answers of the generation eval."""

from __future__ import annotations

from typing import Any

from honing.data.preference.batches import PairCollator
from honing.data.preference.preference_rows import PreferenceRows
from honing.distributed import print0
from honing.errors import ConfigError
from honing.models.attention_choice import is_flash


def packed_pairs(config: Any, section: Any) -> bool:
    """``<section>.packed_pairs``, off under ``parallel.compile: true`` (the per-pair loop would recompile every
    step); under ``auto`` packed pairs win and the blocks stay eager (``Recipe.compile_blockers``)."""
    if section.packed_pairs and config.parallel.compile is True:
        print0(f"{config.method}.packed_pairs is off under parallel.compile: padded rows with a dense 4D mask")
        return False
    return section.packed_pairs


def preference_rows(recipe: Any) -> PreferenceRows:
    """Preference pairs through the chat template, batched by the pair collator."""
    collator = PairCollator(recipe.tokenizer.pad_token_id, additive_mask=recipe.models.attention_name() == "eager")
    return PreferenceRows(
        recipe.tokenizer,
        recipe.chat_template,
        recipe.config.data,
        cache_dir=recipe.cache_dir,
        collator=collator,
        printer=print0,
    )


def check_pair_attention(recipe: Any) -> str:
    """The run's attention kernel, refused in one line when it cannot take the pairs' 4D mask."""
    attention = recipe.models.attention_name()
    if is_flash(attention):
        raise ConfigError(
            f"model.attn_implementation: {attention!r} cannot take the 4D attention mask through which a pair's "
            "two replies share its prompt; use sdpa (or eager)"
        )
    return attention


def held_out_answers(recipe: Any) -> list[tuple[list[dict[str, Any]], str]]:
    """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
    from honing.data.preference.pairs import load_pairs
    from honing.data.text.corpus import split_documents

    data, seed, kind = recipe.config.data, recipe.config.trainer.seed, recipe.row_kind()
    if data.validation is not None:
        pairs = load_pairs(kind.source_fields(data.validation.sources), seed=seed, bad_rows=data.bad_rows).pairs
    elif data.validation_split > 0:
        loaded = load_pairs(kind.source_fields(data.train.sources), seed=seed, bad_rows=data.bad_rows)
        held_out = split_documents(list(zip(loaded.pairs, loaded.origins)), data.validation_split, seed=seed)[1]
        pairs = [pair for pair, _ in held_out]
    else:
        pairs = []
    return [(pair.prompt, pair.chosen[0]["content"]) for pair in pairs if len(pair.chosen) == 1]
