"""What the recipes of the pair methods (DPO, ORPO, CPO / SimPO) share: the chat tokenizer's preference row kind,
the attention check, whether pairs are packed, and the held-out answers of the generation eval."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from honing.data.preference.batches import PairCollator
from honing.data.preference.preference_rows import PreferenceRows
from honing.distributed import print0
from honing.errors import ConfigError
from honing.models.attention_choice import is_flash
from honing.recipes.base import Rows, chat_rows
from honing.run.parts import HeldOutAnswers, ModelAssets

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.data.row_kind import RowKind


class PairSection(Protocol):
    """A pair method's section, as far as packing reads it."""

    packed_pairs: bool


def packed_pairs(config: RunConfig, section: PairSection) -> bool:
    """``<section>.packed_pairs``, off under ``parallel.compile: true`` (the per-pair loop would recompile every
    step); under ``auto`` packed pairs win and the blocks stay eager (``Recipe.compile_blockers``)."""
    if section.packed_pairs and config.parallel.compile is True:
        print0(f"{config.method}.packed_pairs is off under parallel.compile: padded rows with a dense 4D mask")
        return False
    return section.packed_pairs


def preference_rows(
    assets: ModelAssets,
    config: RunConfig,
    *,
    cache_dir: str,
    attention: str,
    kind: Callable[..., Rows] = PreferenceRows,
) -> Rows:
    """Preference pairs through the chat template, batched by the pair collator (``attention``: the run's kernel;
    ``kind``: the pair row kind, DPO's by default)."""
    collator = PairCollator(assets.tokenizer.pad_token_id, additive_mask=attention == "eager")
    return chat_rows(kind, assets, config, cache_dir, collator=collator)


def check_pair_attention(attention: str) -> str:
    """The run's attention kernel, refused in one line when it cannot take the pairs' 4D mask."""
    if is_flash(attention):
        raise ConfigError(
            f"model.attn_implementation: {attention!r} cannot take the 4D attention mask through which a pair's "
            "two replies share its prompt; use sdpa (or eager)"
        )
    return attention


def held_out_answers(kind: RowKind, config: RunConfig) -> HeldOutAnswers:
    """The validation prompts of ``kind``'s rows with their chosen reply's text (the answer the generation eval
    expects)."""
    from honing.data.preference.pairs import load_pairs
    from honing.data.text.corpus import split_documents

    data, seed = config.data, config.trainer.seed
    if data.validation is not None:
        pairs = load_pairs(kind.source_fields(data.validation.sources), seed=seed, bad_rows=data.bad_rows).pairs
    elif data.validation_split > 0:
        loaded = load_pairs(kind.source_fields(data.train.sources), seed=seed, bad_rows=data.bad_rows)
        held_out = split_documents(list(zip(loaded.pairs, loaded.origins)), data.validation_split, seed=seed)[1]
        pairs = [pair for pair, _ in held_out]
    else:
        pairs = []
    return [(pair.prompt, pair.chosen[0]["content"]) for pair in pairs if len(pair.chosen) == 1]
