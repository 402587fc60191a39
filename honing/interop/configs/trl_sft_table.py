"""The verdicts of the fields TRL's ``SFTConfig`` adds to ``TrainingArguments``, and those ``GKDConfig`` (an
``SFTConfig``) adds to it (``key_table("trl").keys[class]``). ``trl_args.py`` reads the honoured ones."""

from __future__ import annotations

from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused
from honing.interop.configs.trl_common_table import (
    DROPOUT,
    NO_ROUTER,
    NOT_SFT,
    PAD_TOKEN,
    PADDING,
    ROUTER,
    TEMPLATE,
    TOKENIZED,
)

SFT: dict[str, Entry] = {
    **TOKENIZED,
    **ROUTER,
    **PAD_TOKEN,
    **TEMPLATE,
    **refused(
        "not translated: a source's text_field (data.sources) names the column of documents", "dataset_text_field"
    ),  # fmt: skip
    **refused("not translated: honing's sources take no dataset-building arguments", "dataset_kwargs"),
    **honoured(
        "data.overlong: truncate ('keep_start'); 'keep_end' refused (honing keeps an example's start)",
        "truncation_mode",
    ),  # fmt: skip
    **moot("not needed: honing's loader shuffles the rows each epoch (data.shuffle)", "shuffle_dataset"),
    **honoured("data.packing (TRL's default false filled in: honing packs by default)", "packing"),
    **moot("not needed: honing packs whole examples, each attending only to itself", "packing_strategy"),
    **moot(PADDING, "padding_free"),
    **moot("not needed: honing's validation rows are packed as the training rows", "eval_packing"),
    **honoured(
        "data.train_on: assistant (true) / all (false; TRL's default on conversations, filled in)",
        "assistant_only_loss",
        "completion_only_loss",
    ),  # fmt: skip
    **honoured("'nll' only (honing's cross-entropy); 'dft' refused", "loss_type"),
}

GKD: dict[str, Entry] = {
    **SFT,
    **NOT_SFT,
    **DROPOUT,
    **NO_ROUTER,
    **honoured_in(
        "distill",
        "temperature",
        "lmbda",
        "beta",
        "max_new_tokens",
        "teacher_model_name_or_path",
        "teacher_model_init_kwargs",
        "seq_kd",
    ),
}
