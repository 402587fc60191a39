"""Oumi training configs (``model`` / ``data`` / ``training`` / ``peft``) as honing's config.

Oumi hands its keys to Hugging Face's ``Trainer`` or TRL, so a run gets their defaults where the config says
nothing (AdamW with betas 0.9 / 0.999, no weight decay, a linear schedule to 0, learning rate 5e-5, 3 epochs, 8 rows
per device, seed 42): the translation writes those, so the same config trains the same way here.
"""

from __future__ import annotations

import os
from typing import Any

from honing.interop.configs.hf_args import set_hf_defaults, set_precision
from honing.interop.configs.oumi_training import translate_peft, translate_training
from honing.interop.configs.translation import Keys, Translation

# Oumi dataset names that are file formats, read from dataset_path: name -> honing's source format
FORMAT_DATASETS = {
    "text_sft": "conversation",
    "text_sft_jsonl": "conversation",
    "vl_sft": "conversation",
    "vl_sft_jsonl": "conversation",
    "preference_pairs_jsonl": "preference",
    "text": "auto",
}
VL_DATASETS = ("vl_sft", "vl_sft_jsonl")
PRETRAIN_DATASETS = ("text",)

# trainer_type -> honing's method; OUMI / HF (Oumi's own and transformers' Trainer) train next-token losses, on
# documents (pretrain) or on conversations (sft), as the data says
TRAINER_METHODS = {"TRL_SFT": "sft", "TRL_DPO": "dpo", "TRL_GRPO": "grpo", "VERL_GRPO": "grpo"}
NEXT_TOKEN_TRAINERS = ("OUMI", "HF")

# Oumi's chat template names -> honing's named templates
CHAT_TEMPLATES = {"llama3-instruct": "llama3", "chat_ml": "chatml", "chatml": "chatml"}

STREAMING_NOTE = (
    "honing reads sources whole (the same rows); for a corpus larger than memory, `honing prepare` streams it into "
    "token shards first"
)

# collator_name -> data.packing (padding collators pad each batch: no packing)
COLLATORS = {
    "text_with_padding": False,
    "text_completions_only_with_padding": False,
    "vision_language_with_padding": False,
    "vision_language_sft": False,
    "dpo_with_padding": None,
}


def is_oumi(raw: dict[str, Any]) -> bool:
    """An Oumi training config: a ``training`` section, ``model.model_name`` or ``data.<split>.datasets``."""
    model, data = raw.get("model"), raw.get("data")
    if isinstance(raw.get("training"), dict) or (isinstance(model, dict) and "model_name" in model):
        return True
    return isinstance(data, dict) and any(isinstance(split, dict) and "datasets" in split for split in data.values())


def translate_oumi(raw: dict[str, Any]) -> Translation:
    """honing's config for an Oumi training config, with refusals and notes."""
    t = Translation("Oumi")
    top = t.section(raw, "")
    training = t.section(top.take("training"), "training")
    data = t.section(top.take("data"), "data")
    method, verl = choose_method(t, training, data)
    t.set("method", method)
    set_hf_defaults(t)
    t.set("optim.lr", 5e-5)
    t.set("trainer.max_duration", "3epochs")
    t.set("trainer.seed", 42)
    t.set("trainer.save_folder", "output")
    translate_model(t, t.section(top.take("model"), "model"), method)
    translate_data(t, data, method)
    translate_training(t, training, method=method, verl=verl)
    translate_peft(t, t.section(top.take("peft"), "peft"), use_peft=bool(training.peek("use_peft")), method=method)
    translate_parallel(t, top)
    top.done("not an Oumi training config section honing translates")
    return t


def choose_method(t: Translation, training: Keys, data: Keys) -> tuple[str, bool]:
    """honing's method for ``training.trainer_type`` and the data; and whether rows and rewards are verl's."""
    trainer = str(training.take("trainer_type", "HF")).upper()
    train = data.peek("train") or {}
    datasets = [item for item in train.get("datasets") or [] if isinstance(item, dict)]
    names = [str(item.get("dataset_name", "")) for item in datasets]
    vision = any(name in VL_DATASETS for name in names) or str(train.get("collator_name") or "").startswith("vision")
    if trainer in TRAINER_METHODS:
        method = TRAINER_METHODS[trainer]
    elif trainer in NEXT_TOKEN_TRAINERS:
        pretraining = any(name in PRETRAIN_DATASETS for name in names) or any(
            item.get("pack") or item.get("streaming") or item.get("stream") for item in [train, *datasets]
        )
        method = "pretrain" if pretraining and not vision else "sft"
    else:
        choices = ", ".join([*TRAINER_METHODS, *NEXT_TOKEN_TRAINERS])
        t.refuse("training.trainer_type", f"{trainer!r} is not available; expected one of: {choices}")
        method = "sft"
    if method == "sft" and vision:
        method = "vl_sft"
    return method, trainer == "VERL_GRPO"


def translate_model(t: Translation, model: Keys, method: str) -> None:
    """``model.*``: the model, its tokenizer, dtype, attention, template and frozen layers."""
    model.copy("model_name", "model.name_or_path")
    if model.has("tokenizer_name") and model.peek("tokenizer_name") != model.peek("model_name"):
        t.set("tokenizer.kind", "pretrained")
        model.copy("tokenizer_name", "tokenizer.path")
    model.take("tokenizer_name")
    model.copy("model_max_length", "data.seq_len", int)
    model.copy("trust_remote_code", "model.trust_remote_code", bool)
    set_precision(t, model.key("torch_dtype_str"), model.take("torch_dtype_str"))
    attention = model.take("attn_implementation")
    if attention is not None:
        t.set("model.attn_implementation", attention)
    model.copy("compile", "parallel.compile", bool)
    model.copy("freeze_layers", "model.freeze_layers", list)
    template = model.take("chat_template")
    if template is not None:
        if method == "vl_sft":
            # a named text template cannot place images: the processor renders image conversations
            t.note(model.key("chat_template"), f"{template!r}: image conversations use the processor's own template")
        elif template in CHAT_TEMPLATES:
            t.set("data.chat_template", CHAT_TEMPLATES[template])
        else:
            t.refuse(
                model.key("chat_template"),
                f"{template!r} is not available; expected one of: {', '.join(CHAT_TEMPLATES)} (or the tokenizer's own)",
            )
    if method == "vl_sft":
        # Oumi trains the vision tower unless freeze_layers names it; honing's default freezes it
        t.set("model.freeze_vision", False)
    model.allow("load_pretrained_weights", (True,), "is not available: honing builds random weights from model.config")
    model.allow(
        "enable_liger_kernel",
        (False,),
        "is not available: honing's chunked loss (model.chunked_loss) does "
        "the same job of never holding the full logits",
    )
    model.allow("device_map", ("auto",), "is not available: honing places the model itself (parallel.*)")
    for name in ("tokenizer_kwargs", "processor_kwargs", "model_kwargs"):
        if model.peek(name):
            model.refuse(name, "not translated: honing passes no extra keyword arguments to transformers")
        model.take(name)
    model.refuse("adapter_model", "not available: load a merged model (honing merge) or give model.lora")
    model.refuse("tokenizer_pad_token", "not available: honing uses the tokenizer's pad token, or eos")
    model.refuse("model_revision", "not available: give a local folder of that revision")
    model.done()


def translate_data(t: Translation, data: Keys, method: str) -> None:
    """``data.train`` / ``data.validation``: datasets as sources, collator as packing."""
    if method == "grpo" and data.has("validation"):
        data.refuse(
            "validation",
            "not available for GRPO: honing checks held-out prompts only by exact match with "
            "an `answer` column (callbacks.generation_eval), not by the rewards as verl and TRL do; remove it",
        )
    for split in ("train",) if method == "grpo" else ("train", "validation"):
        if data.has(split):
            translate_split(t, t.section(data.take(split), data.key(split)), split, method)
        data.take(split)
    data.refuse("test", "not available: honing trains on train and evaluates on validation")
    data.done()


def translate_split(t: Translation, split_keys: Keys, split: str, method: str) -> None:
    """One split's datasets, collator, packing and target column."""
    sources = []
    for index, item in enumerate(split_keys.take("datasets", [])):
        source = translate_dataset(t, t.section(item, f"{split_keys.key('datasets')}[{index}]"), method)
        if source is not None:
            sources.append(source)
    if not sources:
        t.refuse(split_keys.key("datasets"), "expected at least one dataset")
    t.set(f"data.{split}", {"sources": sources})
    collator = split_keys.take("collator_name")
    if collator is not None:
        if collator not in COLLATORS:
            t.refuse(
                split_keys.key("collator_name"),
                f"{collator!r} is not available; expected one of: {', '.join(COLLATORS)}",
            )
        elif COLLATORS[collator] is not None and split == "train" and method in ("sft", "vl_sft"):
            t.set("data.packing", COLLATORS[collator])
            t.set("data.group_by_length", False)  # transformers' default: batches in data order
        elif method == "dpo":
            t.note(
                split_keys.key("collator_name"),
                "pairs are batched by honing's DPO collate (packed, the same log-probs as padded rows)",
            )
    if split_keys.peek("collator_kwargs"):
        split_keys.refuse("collator_kwargs", "not translated: honing's collates take no extra arguments")
    split_keys.take("collator_kwargs")
    pack_key = "pack"
    pack = split_keys.take(pack_key)
    if pack is not None:
        set_pack(t, split_keys.key(pack_key), bool(pack), method)
    text_field = split_keys.take("target_col")
    if text_field is not None:
        for source in sources:
            source["text_field"] = text_field
    split_keys.allow(
        "mixture_strategy",
        ("first_exhausted",),
        "is not available: honing repeats or subsamples each source by its weight",
    )
    if split_keys.take("stream"):
        t.note(split_keys.key("stream"), STREAMING_NOTE)
    split_keys.refuse("seed", "not available: honing's data order follows trainer.seed (training.seed)")
    split_keys.done()


def translate_dataset(t: Translation, item: Keys, method: str) -> dict[str, Any] | None:
    """One Oumi dataset as a honing source: a format read from ``dataset_path``, or a hub name."""
    name = item.take("dataset_name")
    if name is None:
        t.refuse(item.key("dataset_name"), "required key is missing")
        return None
    path, split = item.take("dataset_path"), item.take("split", "train")
    if path is None:
        if name in FORMAT_DATASETS:
            t.refuse(item.key("dataset_path"), f"required for the file format {name!r}")
            return None
        source: dict[str, Any] = {"path": f"{name}:{split}"}
    else:
        # a folder saved by datasets holds splits; a file is one split already
        source = {"path": f"{path}:{split}" if os.path.isdir(path) and item.has("split") else path}
    fmt = FORMAT_DATASETS.get(name, "auto")
    if fmt != "auto":
        source["format"] = fmt
    if item.has("sample_count"):
        source["max_samples"] = int(item.take("sample_count"))
    item.take("sample_count")
    item.refuse(
        "subset",
        "not available: honing reads a hub dataset's default configuration; save the subset with "
        "datasets' save_to_disk and give its folder",
    )
    item.refuse(
        "mixture_proportion",
        "not available: honing repeats or subsamples a source by its weight (0.5 = "
        "half its rows), it does not sample a mixture by proportions; set data.train.sources[].weight",
    )
    shuffle = item.take("shuffle")
    if shuffle is not None:
        t.set("data.shuffle", bool(shuffle))
    item.refuse("seed", "not available: honing's data order follows trainer.seed (training.seed)")
    item.take("shuffle_buffer_size")
    item.allow("trust_remote_code", (False,), "is not available: honing runs no dataset loading scripts")
    item.allow("transform_num_workers", (None,), "")
    kwargs = t.section(item.take("dataset_kwargs"), item.key("dataset_kwargs"))
    processor = kwargs.take("processor_name")
    if processor is not None and processor != t.get("model.name_or_path"):
        t.refuse(kwargs.key("processor_name"), f"{processor!r}: honing uses the model's own processor")
    kwargs.done()
    # the pretraining example sets these per dataset
    if item.has("max_length"):
        t.set("data.seq_len", int(item.take("max_length")))
    item.take("max_length")
    if item.has("pack"):
        set_pack(t, item.key("pack"), bool(item.take("pack")), method)
    for name_ in ("streaming", "stream"):
        if item.take(name_):
            t.note(item.key(name_), STREAMING_NOTE)
    item.done()
    return source


def set_pack(t: Translation, key: str, pack: bool, method: str) -> None:
    """``pack``: rows of whole examples packed together (fine-tuning) or cut from one stream (pretraining)."""
    if method == "pretrain":
        if not pack:
            t.refuse(key, "false is not available: pretraining rows are always cut from one stream of documents")
    elif method in ("sft", "vl_sft"):
        t.set("data.packing", pack)
    elif pack:
        t.refuse(key, f"true is not available for method {method!r}")


def translate_parallel(t: Translation, top: Keys) -> None:
    """``fsdp`` / ``deepspeed``: FSDP2 when enabled; DeepSpeed is refused."""
    fsdp = t.section(top.take("fsdp"), "fsdp")
    if fsdp.take("enable_fsdp"):
        t.set("parallel.strategy", "fsdp")
    fsdp.done("honing's FSDP2 shards every block by itself (parallel.*)")
    deepspeed = t.section(top.take("deepspeed"), "deepspeed")
    deepspeed.allow("enable_deepspeed", (False,), "is not available: honing shards with FSDP2 (parallel.strategy)")
    deepspeed.done("DeepSpeed is not available; honing shards with FSDP2")
