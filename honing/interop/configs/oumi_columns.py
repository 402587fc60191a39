"""Oumi's dataset classes that read a hub data set's own columns (``HuggingFaceDataset``: ``hf_dataset_path`` /
``messages_column``; ``PromptResponseDataset``: ``prompt_column`` / ``response_column``) as a honing source with
``columns`` (docs/data.md#column-mappings)."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Keys, Translation

# each class's dataset_kwargs: honing's column -> (the keyword naming the row's column, Oumi's default)
CLASS_COLUMNS = {
    "HuggingFaceDataset": {"messages": ("messages_column", "messages")},
    "PromptResponseDataset": {"prompt": ("prompt_column", "prompt"), "completion": ("response_column", "response")},
}
CLASS_FORMATS = {"HuggingFaceDataset": "conversation", "PromptResponseDataset": "prompt_completion"}
#: the keywords read here, which the dataset_kwargs reader then leaves alone
CLASS_KWARGS = ("hf_dataset_path", "messages_column", "prompt_column", "response_column",
                "exclude_final_assistant_message")  # fmt: skip


def class_source(t: Translation, item: Keys, name: str, path: str | None, split: str) -> dict[str, Any] | None:
    """The source of one of ``CLASS_COLUMNS``' classes (its hub data set, or ``dataset_path``, in its columns);
    None for any other dataset name, or when refused."""
    if name not in CLASS_COLUMNS:
        return None
    kwargs = item.peek("dataset_kwargs") or {}
    key = item.key("dataset_kwargs")
    hub = kwargs.get("hf_dataset_path") if isinstance(kwargs, dict) else None
    if path is None and not (isinstance(hub, str) and hub):
        t.refuse(f"{key}.hf_dataset_path", f"required by {name}: the hub data set it reads")
        return None
    if isinstance(kwargs, dict) and kwargs.get("exclude_final_assistant_message"):
        t.refuse(f"{key}.exclude_final_assistant_message", "true is not available: honing trains on the final turn")
        return None
    columns = {}
    for ours, (keyword, default) in CLASS_COLUMNS[name].items():
        theirs = kwargs.get(keyword, default) if isinstance(kwargs, dict) else default
        if str(theirs) != ours:
            columns[ours] = str(theirs)
    source: dict[str, Any] = {"path": path if path is not None else f"{hub}:{split}", "format": CLASS_FORMATS[name]}
    return {**source, "columns": columns} if columns else source
