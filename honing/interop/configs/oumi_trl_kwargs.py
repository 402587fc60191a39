"""Oumi's ``training.trainer_kwargs``: the keyword arguments Oumi hands to TRL's config class. The keys
``oumi_training`` reads itself stay there; every other one is read as that TRL class reads it, through honing's
TRL tables (``trl_args``: each field honoured, moot or refused with its reason), so a TRL key honing honours in a
TRL file is honoured here too. Oumi pins an older TRL: keys TRL has since renamed are read under their new name,
with a note."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.trl_args import translate_trl_args

# honing's method -> the TRL config class Oumi's trainer_type hands trainer_kwargs to
TRL_CLASS = {
    "sft": "SFTConfig",
    "vl_sft": "SFTConfig",
    "pretrain": "SFTConfig",
    "dpo": "DPOConfig",
    "vl_dpo": "DPOConfig",
    "kto": "KTOConfig",
    "grpo": "GRPOConfig",
    "vl_grpo": "GRPOConfig",
    "rloo": "RLOOConfig",
    "distill": "GKDConfig",
    "reward": "RewardConfig",
    "orpo": "ORPOConfig",
    "cpo": "CPOConfig",
}
# TRL's old names (Oumi's pinned TRL) -> today's
RENAMED = {"max_seq_length": "max_length"}
# what a pretraining run makes of SFTConfig's data keys: its rows are always one packed stream of documents
PRETRAIN_PACKED = {"data.packing", "data.train_on", "data.group_by_length"}


def translate_rest_as_trl(t: Translation, kwargs: Keys, method: str) -> None:
    """Read every key of ``kwargs`` not taken yet as TRL's config class for ``method`` reads it."""
    rest = {name: value for name, value in kwargs.values.items() if name not in kwargs.taken}
    config_class = TRL_CLASS.get(method)
    if not rest or config_class is None:
        return
    values: dict[str, Any] = {}
    for name, value in rest.items():
        kwargs.taken.add(name)
        new = RENAMED.get(name, name)
        if new != name:
            t.note(kwargs.key(name), f"TRL's former name of {new} (Oumi's pinned TRL): read as {new}")
        values[new] = value
    trl = translate_trl_args(values, config_class)
    for line in trl.refused:  # "key: why", the key under trainer_kwargs
        name, _, why = line.partition(": ")
        t.refuse(kwargs.key(name), why)
    for line in trl.notes:
        name, _, what = line.partition(": ")
        t.note(kwargs.key(name), what)
    for path in sorted(trl.explicit - {"method"}):
        if method == "pretrain" and path in PRETRAIN_PACKED:
            if path == "data.packing" and trl.get(path) is False:
                t.refuse(f"{kwargs.prefix}.packing", "false is not available: pretraining rows are one packed stream")
            else:
                t.note(kwargs.prefix, f"{path}: not needed: pretraining rows are one packed stream of documents")
            continue
        t.set(path, trl.get(path))
