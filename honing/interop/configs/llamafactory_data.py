"""LLaMA-Factory's ``dataset: a,b`` resolved through ``dataset_info.json`` in ``dataset_dir`` as honing's sources:
each entry's file (beside the JSON) or hub data set, its ``formatting`` (alpaca, sharegpt, openai), ``ranking``,
``columns`` and ``tags`` as the row format honing reads (alpaca, sharegpt, conversation, mllm, the preference
formats, pretraining's text / jsonl). honing's formats read fixed column names (LLaMA-Factory's defaults, or
OpenAI-style ``messages`` with role / content); an entry that renames them otherwise is refused with the rename it
needs. The data keys beside (``template``, ``cutoff_len``, ``packing``, ``val_size``, ...) are read here too."""

from __future__ import annotations

import json
import os
from typing import Any

from honing.interop.configs.hf_engines import found_file
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.llamafactory_columns import alpaca_format, message_format
from honing.interop.configs.llamafactory_table import TABLE
from honing.interop.configs.mixture_keys import llamafactory_mixture
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation

SOURCE, KEYS = key_table("llamafactory")

SCHEMA = f"LLaMA-Factory's dataset_info.json ({SOURCE})"
DATA_CONFIG = "dataset_info.json"
# LLaMA-Factory's templates that write the model's own chat format: honing renders with the tokenizer's template
MODEL_TEMPLATES = frozenset(
    {"qwen", "qwen2_vl", "qwen3", "qwen3_nothink", "qwen3_vl", "qwen3_vl_nothink", "qwen3_5", "qwen3_5_nothink",
     "llama2", "llama3", "llama4", "mllama", "gemma", "gemma2", "gemma3", "gemma3n", "mistral", "ministral",
     "phi", "phi4", "deepseek", "deepseek3", "deepseekr1", "glm4", "chatglm3", "yi", "intern2", "intern_vl",
     "llava", "mossvl", "smollm", "smollm2", "olmo"}
)  # fmt: skip


def translate_data(t: Translation, top: Keys, method: str, config_path: str | None) -> None:
    """``dataset`` / ``eval_dataset`` through ``dataset_info.json``, and the data keys beside them."""
    translate_template(t, top.take("template"))
    folder = str(top.take("dataset_dir", "data"))
    media = top.take("media_dir")
    if media is not None and os.path.normpath(str(media)) != os.path.normpath(folder):
        t.refuse("media_dir", f"{media!r}: honing reads an mllm row's images beside its data file ({folder!r})")
    max_samples = top.number("max_samples", int)
    info = dataset_info(t, folder, config_path, top.has("dataset") or top.has("eval_dataset"))
    counts = {}  # each split's number of data sets, which a mixture's probabilities follow
    for name, split in (("dataset", "train"), ("eval_dataset", "validation")):
        names = dataset_names(t, name, top.take(name))
        sources = [source for entry in names for source in entry_sources(t, info, folder, entry, method)]
        for source in sources:
            if max_samples is not None:  # LLaMA-Factory cuts every data set to max_samples rows
                source["max_samples"] = min(source.get("max_samples", max_samples), max_samples)
        if sources:
            t.set(f"data.{split}", {"sources": sources})
            counts[split] = len(names)
    if t.get("data.train") is None:
        t.refuse("dataset", "required: the names of the data sets to train on (dataset_info.json)")
    if method == "sft" and any(source.get("format") == "mllm" for source in t.get("data.train.sources", [])):
        t.set("method", "vl_sft")  # image conversations through the model's processor
    translate_rows(t, top, str(t.get("method")))
    llamafactory_mixture(t, top, counts)


def translate_template(t: Translation, template: Any) -> None:
    """``template``: honing's named template, or the tokenizer's own for a model's template."""
    if template is None:
        return
    name = str(template)
    if name in ("llama3", "chatml"):
        t.set("data.chat_template", name)
    elif name in MODEL_TEMPLATES:
        t.note("template", f"{name!r}: the model's own chat format; honing renders with the tokenizer's template")
    else:
        t.refuse("template", f"{name!r} is not available: honing renders with the tokenizer's template, chatml or "
                             "llama3 (data.chat_template)")  # fmt: skip


def dataset_info(t: Translation, folder: str, config_path: str | None, needed: bool) -> dict[str, Any] | None:
    """``dataset_dir/dataset_info.json`` (from the working directory, or beside the config); None for ``ONLINE``."""
    if folder == "ONLINE" or not needed:
        return None
    path = found_file(os.path.join(folder, DATA_CONFIG), config_path)
    if path is None:
        t.refuse(
            "dataset_dir", f"{folder!r}: no {DATA_CONFIG} there (from the working directory or the config's folder)"
        )
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            info = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        t.refuse("dataset_dir", f"{path}: not a JSON mapping of data sets ({error})")
        return None
    if not isinstance(info, dict):
        t.refuse("dataset_dir", f"{path}: expected a JSON mapping of data set names")
        return None
    info["__folder__"] = os.path.dirname(path)
    return info


def dataset_names(t: Translation, key: str, value: Any) -> list[str]:
    """``a,b`` or a list as names."""
    if value is None:
        return []
    names = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else None
    if names is None:
        t.refuse(key, f"{value!r}: expected names separated by commas")
        return []
    return [str(name).strip() for name in names if str(name).strip()]


def entry_sources(
    t: Translation, info: dict[str, Any] | None, folder: str, name: str, method: str
) -> list[dict[str, Any]]:
    """One ``dataset_info.json`` entry (or, ``ONLINE``, a hub data set in alpaca format) as a source."""
    if info is None:
        return [{"path": f"{name}:train"}] if folder == "ONLINE" else []
    if name not in info or not isinstance(info[name], dict):
        t.refuse(f"dataset_info.json[{name}]", f"no such data set in {os.path.join(folder, DATA_CONFIG)}")
        return []
    entry = t.section(info[name], f"dataset_info.json[{name}]")
    source = entry_location(t, entry, info["__folder__"])
    fmt = entry_format(t, entry, method, str(source.get("path", "")) if source else "")
    finish(entry, TABLE["dataset_info"], KEYS["dataset_info"], SCHEMA)
    if source is None or fmt is None:
        return []
    if fmt != "auto":
        source.update(fmt if isinstance(fmt, dict) else {"format": fmt})
    return [source]


def entry_location(t: Translation, entry: Keys, folder: str) -> dict[str, Any] | None:
    """``file_name`` beside the JSON, or ``hf_hub_url`` with its ``subset`` / ``split``; ``num_samples``."""
    file_name, hub = entry.take("file_name"), entry.take("hf_hub_url")
    split, subset = str(entry.take("split", "train")), entry.take("subset")
    other_hubs = [key for key in ("ms_hub_url", "om_hub_url") if entry.take(key) is not None]
    if entry.has("folder"):
        entry.refuse("folder", "not available: honing reads a hub data set's configurations (subset), not folders")
    if isinstance(hub, str) and hub:
        source: dict[str, Any] = {"path": f"{hub}:{split}"}
        if subset is not None:
            source["subset"] = str(subset)
    elif isinstance(file_name, str) and file_name:
        source = {"path": os.path.join(folder, file_name)}
        if subset is not None:
            t.refuse(entry.key("subset"), f"{subset!r}: a subset is read from a hub data set")
    else:
        if other_hubs:
            t.refuse(entry.key(other_hubs[0]), "not available: honing reads files or the Hugging Face hub (hf_hub_url)")
        elif not any(entry.has(key) for key in ("script_url", "cloud_file_name")):
            t.refuse(entry.key("file_name"), "required: file_name or hf_hub_url")
        return None
    samples = entry.number("num_samples", int)
    if samples is not None:
        source["max_samples"] = samples
    return source


def entry_format(t: Translation, entry: Keys, method: str, path: str) -> str | dict[str, Any] | None:
    """The honing format of an entry's ``formatting`` / ``ranking`` / ``columns`` / ``tags``; None when refused."""
    formatting = str(entry.take("formatting", "alpaca"))
    ranking = bool(entry.take("ranking", False))
    columns = t.section(entry.take("columns"), entry.key("columns"))
    tags = t.section(entry.take("tags"), entry.key("tags"))
    try:
        if method == "pretrain":
            return pretraining_format(t, columns, path)
        if formatting == "alpaca":
            return alpaca_format(t, columns, ranking, method)
        if formatting in ("sharegpt", "openai"):
            return message_format(t, columns, tags, ranking, formatting, method)
        t.refuse(entry.key("formatting"), f"{formatting!r} is not available; expected alpaca, sharegpt or openai")
        return None
    finally:
        for section, group in ((columns, "dataset_info.columns"), (tags, "dataset_info.tags")):
            finish(section, TABLE[group], KEYS[group], SCHEMA)


def pretraining_format(t: Translation, columns: Keys, path: str) -> dict[str, Any]:
    """Stage pt: documents from the ``prompt`` column (``text`` by LLaMA-Factory's examples); a ``.txt`` file's lines
    are its documents, as LLaMA-Factory reads them."""
    field = str(columns.take("prompt", "text"))
    if path.endswith(".txt"):
        t.set("data.text_document_separator", "\n")
        return {"format": "text"}
    return {"format": "auto"} if field == "text" else {"format": "auto", "text_field": field}


def translate_rows(t: Translation, top: Keys, method: str) -> None:
    """Length, masking, packing, the validation share, workers and order."""
    top.copy("cutoff_len", "data.seq_len", int)
    if top.take("train_on_prompt") and method in ("sft", "vl_sft"):
        t.set("data.train_on", "all")
    packing, neat = top.take("packing"), top.take("neat_packing")
    if method in ("sft", "vl_sft") and (packing or neat):
        t.set("data.packing", True)
        if not neat:
            t.note("packing", "honing's packed examples attend only to themselves (LLaMA-Factory's neat_packing)")
    elif packing is False and method == "pretrain":
        t.refuse("packing", "false is not available: pretraining rows are always cut from one stream of documents")
    size = top.number("val_size", float)
    if size:
        if size >= 1:
            t.refuse("val_size", f"{size!r} rows: honing holds out a fraction of the rows (give 0 < val_size < 1)")
        elif t.get("data.validation") is None:
            t.set("data.validation_split", size)
    top.copy("dataloader_num_workers", "data.num_workers", int)
    if top.take("disable_shuffling"):
        t.set("data.shuffle", False)
