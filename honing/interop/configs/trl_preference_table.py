"""The verdicts of the fields TRL's offline preference configs add to ``TrainingArguments``: ``DPOConfig``,
``KTOConfig``, ``ORPOConfig``, ``CPOConfig`` and ``RewardConfig`` (``key_table("trl").keys[class]``). ``trl_args.py``
reads the honoured ones; ``test_trl_schema_walk.py`` checks every installed field has a row."""

from __future__ import annotations

from honing.interop.configs.schema_table import Entry, honoured, honoured_in, moot, refused
from honing.interop.configs.trl_common_table import (
    DROPOUT,
    ENCODER_DECODER,
    LENGTH,
    MODEL,
    NO_ROUTER,
    NOT_SFT,
    PAD_TOKEN,
    PADDING_VALUE,
    REFERENCE_SYNC,
    TEMPLATE,
    TOKENIZED,
)

PRECOMPUTE = {
    **honoured(
        "dpo.reference / kto.reference: precompute (the reference's scores once, before training)",
        "precompute_ref_log_probs",
    ),  # fmt: skip
    **moot("not needed: honing scores the reference with the training batch size", "precompute_ref_batch_size"),
}
TRUNCATION = "not available: honing cuts a pair's prompt from its start so the pair fits data.seq_len"
DECODER_ONLY_LENGTH = (
    "not needed: TRL cuts completions to it for encoder-decoder models only; a decoder-only pair is cut to max_length "
    "(data.seq_len)"
)

DPO: dict[str, Entry] = {
    **NOT_SFT,
    **PAD_TOKEN,
    **TOKENIZED,
    **NO_ROUTER,
    **DROPOUT,
    **REFERENCE_SYNC,
    **PRECOMPUTE,
    **refused(TRUNCATION, "truncation_mode"),
    **moot("not needed: honing packs pairs itself when asked (dpo.packed_pairs)", "padding_free"),
    **honoured("dpo.loss_type (a name, or a list of them summed with loss_weights)", "loss_type"),
    **honoured_in(
        "dpo",
        "loss_weights",
        "ld_alpha",
        "f_divergence_type",
        "f_alpha_divergence_coef",
        "use_weighting",
        "discopop_tau",
        "label_smoothing",
        "beta",
    ),
}

KTO: dict[str, Entry] = {
    **NOT_SFT,
    **TOKENIZED,
    **NO_ROUTER,
    **DROPOUT,
    **REFERENCE_SYNC,
    **PRECOMPUTE,
    **honoured_in("kto", "loss_type", "beta", "desirable_weight", "undesirable_weight"),
}

ORPO: dict[str, Entry] = {
    **NOT_SFT,
    **MODEL,
    **DROPOUT,
    **LENGTH,
    **ENCODER_DECODER,
    **PADDING_VALUE,
    **moot(DECODER_ONLY_LENGTH, "max_completion_length"),
    **honoured("orpo.beta", "beta"),
}

CPO: dict[str, Entry] = {
    **{key: entry for key, entry in ORPO.items() if key != "padding_value"},
    **honoured_in("cpo", "beta", "label_smoothing"),
    **honoured("cpo.loss_type (sigmoid, hinge, ipo, simpo)", "loss_type"),
    **honoured_in("cpo", "cpo_alpha", "simpo_gamma", "alpha"),
}

REWARD: dict[str, Entry] = {
    **NOT_SFT,
    **PAD_TOKEN,
    **TOKENIZED,
    **DROPOUT,
    **TEMPLATE,
    **honoured("reward.center_rewards_coefficient", "center_rewards_coefficient"),
}
