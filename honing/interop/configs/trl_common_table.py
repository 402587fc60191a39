"""The verdicts TRL's config classes share: the fields ``_BaseConfig``'s subclasses each declare again (model
loading, dropout, padding, tokens), and the reasons the family tables give. ``trl_args.py`` reads the honoured
ones."""

from __future__ import annotations

from honing.interop.configs.axolotl_reasons import GENERATION, PREPROCESS
from honing.interop.configs.schema_table import Entry, honoured, moot, refused

PADDING = "not needed: honing pads each batch itself and masks padding by position"
NO_SYNC = "not available: honing's reference model is fixed (TRL's TR-DPO reference sync)"
UNUSED_WITHOUT_SYNC = "unused without sync_ref_model"
NEFTUNE_SFT_ONLY = "not available for this method: honing adds NEFTune noise to SFT only (sft.neftune_noise_alpha)"
# TrainingArguments' verdicts a class other than SFT / GKD changes
OWN_LOSS = (
    "not needed: the class's trainer computes its own loss (its compute_loss) and never calls transformers' label "
    "smoother, so TRL ignores it too"
)
NOT_SFT: dict[str, Entry] = {
    **refused(NEFTUNE_SFT_ONLY, "neftune_noise_alpha"),
    **moot(OWN_LOSS, "label_smoothing_factor"),
}

LOADING: dict[str, Entry] = {
    **honoured("model.load_kwargs (a mapping; a JSON string is refused)", "model_init_kwargs"),
    **honoured("model.trust_remote_code", "trust_remote_code"),
}
MODEL: dict[str, Entry] = {**LOADING, **moot(PREPROCESS, "dataset_num_proc")}
ROUTER: dict[str, Entry] = honoured("model.router_aux_loss_coef", "router_aux_loss_coef")
NO_ROUTER: dict[str, Entry] = refused(
    "not available for this method: honing adds the router's load-balancing loss to pretraining and SFT only",
    "router_aux_loss_coef",
)
DROPOUT: dict[str, Entry] = honoured("model.disable_dropout (TRL's default filled in; honing's null is the same)",
                                     "disable_dropout")  # fmt: skip
LENGTH: dict[str, Entry] = honoured("data.seq_len (TRL's default 1024 filled in)", "max_length")
PAD: dict[str, Entry] = moot(PADDING, "pad_to_multiple_of")
PAD_TOKEN: dict[str, Entry] = moot(PADDING, "pad_token")
OFFLOAD: dict[str, Entry] = honoured("parallel.activation_offload", "activation_offloading")
# what SFT's, DPO's, KTO's and the reward model's configs each declare again: loading, length, padding, offloading
TOKENIZED: dict[str, Entry] = {**MODEL, **LENGTH, **PAD, **OFFLOAD}
REFERENCE_SYNC: dict[str, Entry] = {
    **refused(NO_SYNC, "sync_ref_model"),
    **moot(UNUSED_WITHOUT_SYNC, "ref_model_mixup_alpha", "ref_model_sync_steps"),
}
TEMPLATE: dict[str, Entry] = {
    **honoured(
        "data.chat_template: a .jinja / .j2 file's text (a tokenizer to clone the template of is refused)",
        "chat_template_path",
    ),  # fmt: skip
    **honoured(
        "tokenizer.special_tokens.eos_token (a text the vocabulary lacks is added, where TRL refuses it)", "eos_token"
    ),  # fmt: skip
}
ENCODER_DECODER: dict[str, Entry] = {
    **moot(
        "not needed: TRL reads it only when no model is given (a model's own config decides); honing trains "
        "decoder-only models, given by model.name_or_path",
        "is_encoder_decoder",
    ),  # fmt: skip
    **refused(GENERATION, "generate_during_eval"),
}
PADDING_VALUE: dict[str, Entry] = moot(PADDING, "padding_value")
