"""axolotl's ``datasets`` / ``test_datasets`` / ``pretraining_dataset`` lists as honing's sources: each item's
``path`` (a file, folder, hub name, or a loader name with ``data_files``), its ``type`` as the row format honing
reads, and the column settings honing's formats already follow (``messages`` with role / content, ShareGPT's
``conversations`` with from / value). A type that is axolotl's own prompt code, or columns honing's formats do not
name, is refused with what honing reads instead."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.axolotl_columns import message_columns, preference_columns
from honing.interop.configs.axolotl_table import TABLE
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation

SOURCE, KEYS = key_table("axolotl")

SCHEMA = f"axolotl ({SOURCE})"
# datasets' builder names axolotl passes to load_dataset with data_files (the files are the source)
LOADERS = ("json", "parquet", "csv", "text", "arrow")
# SFT types whose rows are one of honing's formats as they are
SFT_TYPES = {"alpaca": "alpaca", "sharegpt": "sharegpt", "completion": "text"}
# FastChat's conversation templates (an older axolotl's sharegpt `conversation`) that honing has by name
CONVERSATION_TEMPLATES = {"chatml": "chatml", "llama-3": "llama3", "llama3": "llama3"}
PREFERENCE_METHODS = ("dpo", "orpo", "cpo")
# axolotl's chat templates (its ChatTemplate enum) that copy one model family's own template
FAMILY_TEMPLATES = frozenset(
    {"mistral_v1", "mistral_v2v3", "mistral_v3_tekken", "mistral_v7_tekken", "gemma", "cohere", "llama3_2_vision",
     "llama4", "phi_3", "phi_35", "deepseek_v2", "deepseek_v3", "jamba", "qwen_25", "qwen3", "qwen3_5", "falcon_h1",
     "nemotron_h", "exaone", "exaone4", "pixtral", "llava", "qwen2_vl", "gemma3", "gemma3n", "gemma4",
     "gemma4_unified", "command_a", "command_a_tool_use", "command_a_rag", "aya"}
)  # fmt: skip
TYPES_READ = (
    "alpaca, chat_template (messages with role / content, or conversations with from / value), completion and "
    "sharegpt rows; for preference pairs chat_template.default and *.prompt_pairs"
)


def translate_datasets(t: Translation, top: Keys, method: str) -> None:
    """``datasets`` as ``data.train.sources`` and ``test_datasets`` as ``data.validation.sources``."""
    for name, split in (("datasets", "train"), ("test_datasets", "validation")):
        items = top.take(name)
        if items is None:
            continue
        if not isinstance(items, list):
            t.refuse(name, f"{items!r}: expected a list of datasets")
            continue
        sources = []
        for index, item in enumerate(items):
            keys = t.section(item, f"{name}[{index}]")
            sources += dataset_sources(t, keys, method)
            finish(keys, TABLE["datasets[]"], KEYS["datasets[]"], SCHEMA)
        if method == "pretrain" and split == "train":
            continue  # pretraining_dataset gives the training documents
        if sources:
            t.set(f"data.{split}", {"sources": sources})
    if method != "pretrain" and t.get("data.train") is None:
        t.refuse("datasets", "required: at least one dataset to train on")


def dataset_sources(t: Translation, item: Keys, method: str) -> list[dict[str, Any]]:
    """One dataset as honing's sources (several when it lists several data files)."""
    paths = source_paths(t, item)
    fmt = row_format(t, item, method)
    if not paths or fmt is None:
        return []
    source: dict[str, Any] = {} if fmt == "auto" else dict(fmt) if isinstance(fmt, dict) else {"format": fmt}
    if fmt == "text":
        field = item.take("field")
        if field and field != "text":
            source["text_field"] = str(field)
        if method == "sft":
            t.set("data.train_on", "all")  # a completion row is trained on all its tokens
    else:
        item.note("field", "unused: only type completion reads a text field (as in axolotl)")
    subset = item.take("name")
    if subset is not None:
        source["subset"] = str(subset)
    return [{"path": path, **source} for path in paths]


def source_paths(t: Translation, item: Keys) -> list[str]:
    """``path`` (with ``split`` for a hub data set), or ``data_files`` under a loader name."""
    path, files, split = item.take("path"), item.take("data_files"), item.take("split")
    if not isinstance(path, str) or not path:
        t.refuse(item.key("path"), "required: a file, folder or hub data set")
        return []
    if files is not None:
        if path not in LOADERS:
            t.refuse(item.key("data_files"), f"files of the hub data set {path!r} are not available; give the files")
            return []
        return [str(name) for name in (files if isinstance(files, list) else [files])]
    if path in LOADERS:
        t.refuse(item.key("path"), f"{path!r} is a loader name: give its files as data_files")
        return []
    local = path.startswith((".", "/", "~")) or path.endswith((".json", ".jsonl", ".parquet", ".csv", ".txt"))
    if split is not None and not local:
        return [f"{path}:{split}"]
    if split not in (None, "train"):
        t.note(item.key("split"), f"{split!r}: unused, a file holds one split")
    return [path]


def row_format(t: Translation, item: Keys, method: str) -> str | dict[str, Any] | None:
    """The honing row format of the dataset's ``type`` and columns; None when refused."""
    kind = item.take("type")
    key = item.key("type")
    if isinstance(kind, dict) or kind is None:
        t.refuse(key, f"{'a user-defined prompt format' if kind else 'required'}: honing reads {TYPES_READ}")
        return None
    kind = str(kind)
    template_name, template_jinja = item.take("chat_template"), item.take("chat_template_jinja")
    if template_name is not None or template_jinja is not None:
        translate_template(t, template_name, template_jinja, item.key("chat_template"))
    if method in PREFERENCE_METHODS:
        return preference_format(t, item, kind)
    if method != "sft":
        t.refuse(key, f"{kind!r} for method {method!r}: not available; honing reads {TYPES_READ}")
        return None
    train_roles(t, item)
    for name in ("field_chosen", "field_rejected"):
        item.note(name, f"unused by type {kind!r} (preference pairs' columns)")
    if kind == "sharegpt" and str(item.peek("conversation")) in CONVERSATION_TEMPLATES:
        # an older axolotl's sharegpt: `conversation` names FastChat's template the turns are rendered with
        translate_template(t, CONVERSATION_TEMPLATES[str(item.take("conversation"))], None, item.key("conversation"))
    if kind in SFT_TYPES:
        return SFT_TYPES[kind]
    if kind == "chat_template":
        return message_format(t, item)
    t.refuse(key, f"{kind!r} is axolotl's own prompt format; honing reads {TYPES_READ}")
    return None


def message_format(t: Translation, item: Keys) -> dict[str, Any] | None:
    """``chat_template`` rows: honing's format, with the entry's columns and speakers mapped (axolotl_columns)."""
    return message_columns(t, item)


def train_roles(t: Translation, item: Keys) -> None:
    """``roles_to_train``: the assistant's turns (honing's default) or every turn."""
    roles = item.names("roles_to_train")
    if roles is None:
        return
    if set(roles) <= {"assistant", "gpt"}:
        return
    if {"user", "assistant"} <= set(roles) or {"human", "gpt"} <= set(roles):
        t.set("data.train_on", "all")
        return
    t.refuse(item.key("roles_to_train"), f"{roles!r}: honing trains on the assistant's turns or on every token")


def preference_format(t: Translation, item: Keys, kind: str) -> str | dict[str, Any] | None:
    """A preference type: ``chat_template.default`` (messages, chosen, rejected) or ``*.prompt_pairs`` (prompt,
    chosen, rejected strings)."""
    if kind == "chat_template.default" or kind == "chat_template":
        columns = preference_columns(item)
        return {"format": "preference", "columns": columns} if columns else "preference"
    if kind.endswith(".prompt_pairs"):
        t.note(item.key("type"), f"{kind!r}: prompt / chosen / rejected strings, rendered by the run's chat template")
        return "preference_prompt"
    t.refuse(item.key("type"), f"{kind!r} is axolotl's own transform of a data set; honing reads {TYPES_READ}")
    return None


def translate_template(t: Translation, name: Any, jinja: Any, key: str) -> None:
    """axolotl's ``chat_template`` name (or ``jinja`` with its text) as ``data.chat_template``."""
    if name is None and jinja is None:
        return
    text = str(name or "jinja")
    if text == "tokenizer_default" or text.startswith("tokenizer_default_fallback_"):
        t.note(key, f"{text!r}: honing renders with the tokenizer's own template")
    elif text in FAMILY_TEMPLATES:
        t.note(key, f"{text!r}: axolotl's copy of that model family's own template; honing renders with the "
                    "tokenizer's template (a base model without one needs chat_template_jinja)")  # fmt: skip
    elif text in ("chatml", "llama3"):
        t.set("data.chat_template", text)
    elif text == "jinja" and isinstance(jinja, str):
        t.set("data.chat_template", jinja)
    else:
        t.refuse(key, f"{text!r} is not a template honing has (chatml, llama3); give its Jinja as chat_template_jinja")


def translate_pretraining(t: Translation, top: Keys) -> None:
    """``pretraining_dataset``: documents from files or hub data sets, cut into rows of ``data.seq_len``."""
    items = top.take("pretraining_dataset")
    items = items if isinstance(items, list) else [items]
    sources = []
    for index, raw in enumerate(items):
        item = t.section(raw, f"pretraining_dataset[{index}]")
        path, files = item.take("path"), item.take("data_files")
        split, subset = item.take("split"), item.take("name")
        if files is not None and path in LOADERS:
            paths = [str(name) for name in (files if isinstance(files, list) else [files])]
        elif isinstance(path, str) and path:
            paths = [f"{path}:{split}" if split and not path.endswith((".json", ".jsonl", ".txt")) else path]
        else:
            t.refuse(item.key("path"), "required: a file, folder or hub data set")
            paths = []
        kind = item.take("type", "pretrain")
        if kind != "pretrain":
            t.refuse(item.key("type"), f"{kind!r}: honing pretrains on plain documents (type: pretrain)")
        field = item.take("text_column", "text")
        for path in paths:
            source: dict[str, Any] = {"path": path}
            if field != "text":
                source["text_field"] = str(field)
            if subset is not None:
                source["subset"] = str(subset)
            sources.append(source)
        finish(item, TABLE["pretraining_dataset[]"], KEYS["pretraining_dataset[]"], SCHEMA)
    if sources:
        t.set("data.train", {"sources": sources})
