"""Oumi training configs (``model`` / ``data`` / ``training`` / ``peft`` / ``fsdp`` / ``deepspeed``) as honing's
config.

Oumi hands its keys to Hugging Face's ``Trainer`` or TRL, so a run gets Oumi's, TRL's and transformers' defaults
where the config says nothing (``oumi_defaults``); the translation writes those where honing's own differ, so the
same config trains the same way here. Each section has its module: ``oumi_model``, ``oumi_data``,
``oumi_training``, ``oumi_peft``, ``oumi_parallel``.
"""

from __future__ import annotations

from typing import Any

from honing.interop.configs.interpolations import resolve_interpolations
from honing.interop.configs.machine_options import settle_vllm_mode
from honing.interop.configs.oumi_data import reads_documents, reads_images, translate_data
from honing.interop.configs.oumi_defaults import fill_defaults, fill_grpo_length
from honing.interop.configs.oumi_model import translate_model
from honing.interop.configs.oumi_parallel import translate_parallel
from honing.interop.configs.oumi_peft import translate_peft
from honing.interop.configs.oumi_profiler import translate_profiler, translate_telemetry
from honing.interop.configs.oumi_shape import name_keys_oumi_lacks
from honing.interop.configs.oumi_training import translate_training
from honing.interop.configs.translation import Keys, Translation

# trainer_type -> honing's method; OUMI / HF (Oumi's own and transformers' Trainer) train next-token losses, on
# documents (pretrain) or on conversations (sft), as the data says
TRAINER_METHODS = {"TRL_SFT": "sft", "TRL_DPO": "dpo", "TRL_GRPO": "grpo", "VERL_GRPO": "grpo"}
TRAINER_METHODS.update(TRL_GKD="distill", TRL_GOLD="distill")  # GOLD without its cross-tokenizer loss
TRAINER_METHODS["TRL_KTO"] = "kto"
NEXT_TOKEN_TRAINERS = ("OUMI", "HF")
# Oumi's trainers for methods honing does not have -> the method's name
MISSING_METHODS: dict[str, str] = {}


def is_oumi(raw: dict[str, Any]) -> bool:
    """An Oumi training config: a ``training`` section, ``model.model_name`` or ``data.<split>.datasets``."""
    model, data = raw.get("model"), raw.get("data")
    if isinstance(raw.get("training"), dict) or (isinstance(model, dict) and "model_name" in model):
        return True
    return isinstance(data, dict) and any(isinstance(split, dict) and "datasets" in split for split in data.values())


def translate_oumi(raw: dict[str, Any]) -> Translation:
    """honing's config for an Oumi training config, with refusals, notes and the defaults filled in."""
    t = Translation("Oumi")
    top = t.section(resolve_interpolations(raw), "")  # OmegaConf's ${a.b} references, as Oumi's loader does
    training = t.section(top.take("training"), "training")
    data = t.section(top.take("data"), "data")
    trainer = str(training.peek("trainer_type", "HF")).upper()
    method, verl = choose_method(t, training, data)
    t.set("method", method)
    fill_defaults(t, method, trainer)
    translate_model(t, t.section(top.take("model"), "model"), method)
    translate_data(t, data, method)
    translate_profiler(t, training)  # training.profiler / telemetry: walked against oumi_table's rows
    translate_telemetry(t, training)
    translate_training(t, training, method=method, verl=verl)
    translate_peft(t, t.section(top.take("peft"), "peft"), use_peft=bool(training.peek("use_peft")), method=method)
    translate_parallel(t, top)
    if method in ("grpo", "vl_grpo"):
        fill_grpo_length(t, verl)
        kwargs = training.peek("trainer_kwargs")
        where = "trainer_kwargs" if isinstance(kwargs, dict) and "vllm_mode" in kwargs else "grpo"
        settle_vllm_mode(t, "grpo", f"training.{where}.vllm_mode")
    top.done("not an Oumi training config section honing translates")
    name_keys_oumi_lacks(t, raw)  # a file written for Oumi with keys Oumi lacks: say so, not "honing lacks it"
    return t


def choose_method(t: Translation, training: Keys, data: Keys) -> tuple[str, bool]:
    """honing's method for ``training.trainer_type`` and the data; and whether rows and rewards are verl's."""
    trainer = str(training.take("trainer_type", "HF")).upper()
    images = reads_images(data.values)
    if trainer in NEXT_TOKEN_TRAINERS or trainer == "TRL_SFT":
        documents = not images and reads_documents(data.values, next_token_trainer=trainer != "TRL_SFT")
        method = "pretrain" if documents else "vl_sft" if images else "sft"
    elif trainer in TRAINER_METHODS:
        method = TRAINER_METHODS[trainer]
        if images and method == "grpo":
            method = "vl_grpo"  # image prompts through the model's processor
        elif images and method == "dpo":
            method = "vl_dpo"  # image preference pairs through the model's processor
        elif images:
            t.refuse("training.trainer_type", f"{trainer!r} on image data: not available for method {method!r}")
    else:
        missing = MISSING_METHODS.get(trainer)
        choices = ", ".join([*TRAINER_METHODS, *NEXT_TOKEN_TRAINERS])
        t.refuse(
            "training.trainer_type",
            f"{trainer!r}: {missing} is not available in honing"
            if missing
            else f"{trainer!r} is not available; expected one of: {choices}",
        )
        method = "sft"
    return method, trainer == "VERL_GRPO"
