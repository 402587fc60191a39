"""Oumi's dataset classes that read a hub data set's own columns (``HuggingFaceDataset``: ``hf_dataset_path`` /
``messages_column``; ``PromptResponseDataset``: ``prompt_column`` / ``response_column``; ``hf_vision``:
``image_column`` / ``question_column`` / ``answer_column``) as a honing source with ``columns``
(docs/data.md#column-mappings)."""

from __future__ import annotations

import os
from typing import Any

from honing.interop.configs.translation import Keys, Translation

# each class's dataset_kwargs: honing's column -> (the keyword naming the row's column, Oumi's default; None: the
# keyword is required, OPTIONAL: the column is read only when named)
OPTIONAL = ""
CLASS_COLUMNS = {
    "HuggingFaceDataset": {"messages": ("messages_column", "messages")},
    "PromptResponseDataset": {"prompt": ("prompt_column", "prompt"), "completion": ("response_column", "response")},
    # an alpaca row with its image (docs/data.md#column-mappings): the image before the question, as Oumi puts it
    "hf_vision": {"images": ("image_column", None), "instruction": ("question_column", None),
                  "output": ("answer_column", None), "system": ("system_prompt_column", OPTIONAL)},
}  # fmt: skip
CLASS_FORMATS = {
    "HuggingFaceDataset": "conversation",
    "PromptResponseDataset": "prompt_completion",
    "hf_vision": "mllm",
}
#: the keywords read here, which the dataset_kwargs reader then leaves alone
CLASS_KWARGS = ("hf_dataset_path", "messages_column", "prompt_column", "response_column",
                "exclude_final_assistant_message", "image_column", "question_column", "answer_column",
                "system_prompt_column")  # fmt: skip
REQUIRED_WHY = {"answer_column": "the answer the model learns (without it Oumi's rows have no reply to train on)"}


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
        if theirs is None or (theirs == OPTIONAL and default != OPTIONAL):
            t.refuse(f"{key}.{keyword}", f"required by {name}: {REQUIRED_WHY.get(keyword, 'the column it reads')}")
            return None
        if theirs != OPTIONAL and str(theirs) != ours:
            columns[ours] = str(theirs)
    if path is None and os.path.isfile(str(hub)):  # Oumi reads a local hf_dataset_path as the dataset_path
        path = str(hub)
    if name == "hf_vision":
        t.note(
            f"{key}.image_column",
            "read as one image: a hub Image cell, a URL or a path beside the data (a string Oumi would take as "
            "base64 is a path here); it leads the question unless the question holds <image>",
        )
    source: dict[str, Any] = {"path": path if path is not None else f"{hub}:{split}", "format": CLASS_FORMATS[name]}
    return {**source, "columns": columns} if columns else source
