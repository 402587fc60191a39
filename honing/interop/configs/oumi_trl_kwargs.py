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
# SFTConfig's dataset_kwargs.skip_prepare_dataset, under trainer_kwargs or a data set's dataset_kwargs alike
SKIP_PREPARE = (
    "not needed: TRL's own tokenizing of the rows, which Oumi skips for its collators; honing builds the rows itself "
    "either way"
)
# what a pretraining run makes of SFTConfig's data keys: its rows are always one packed stream of documents
PRETRAIN_PACKED = {"data.packing", "data.train_on", "data.group_by_length"}


def translate_oumi_only(t: Translation, kwargs: Keys) -> None:
    """The trainer_kwargs Oumi's users write that TRL's config class does not read the way honing's tables do:
    accelerate's seedable sampler (Oumi always sets it) and SFTConfig's ``dataset_kwargs`` (TRL's own row building,
    which Oumi skips for its collators)."""
    kwargs.note(
        "use_seedable_sampler",
        "not needed: honing's loader order is always seeded (trainer.seed, a permutation per epoch), as accelerate's "
        "seedable sampler, which Oumi turns on itself",
    )
    dataset_kwargs = t.section(kwargs.take("dataset_kwargs"), kwargs.key("dataset_kwargs"))
    dataset_kwargs.note("skip_prepare_dataset", SKIP_PREPARE)
    dataset_kwargs.done("not available: TRL reads skip_prepare_dataset only; honing builds its rows itself")


def translate_rest_as_trl(t: Translation, kwargs: Keys, method: str) -> None:
    """Read every key of ``kwargs`` not taken yet as TRL's config class for ``method`` reads it."""
    translate_oumi_only(t, kwargs)
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
