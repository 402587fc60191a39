"""The verdicts of LLaMA-Factory's ``dataset_info.json``: an entry's keys, its ``columns`` and its ``tags`` (what
``llamafactory_data.py`` reads of each); ``llamafactory_table.TABLE`` gathers them with the training arguments'."""

from __future__ import annotations

from honing.interop.configs.schema_table import Entry, honoured, refused

DATASET_INFO: dict[str, Entry] = {
    **honoured("the source's path (beside dataset_info.json)", "file_name"),
    **honoured("the source's path (a hub data set)", "hf_hub_url"),
    **honoured("the source's row format", "formatting", "ranking"),
    **honoured("the source's subset", "subset"),
    **honoured("a hub source's split (name:split)", "split"),
    **refused("not available: honing reads a hub data set's configurations (subset), not its folders", "folder"),
    **honoured("the source's max_samples", "num_samples"),
    **honoured("the source's columns (other names than honing's formats read: mapped)", "columns"),
    **honoured("the message keys and speakers (other names: the source's columns and roles)", "tags"),
    **honoured(
        "beside hf_hub_url unused (LLaMA-Factory's default hub); alone refused: honing reads the Hugging "
        "Face hub or files",
        "ms_hub_url",
        "om_hub_url",
    ),  # fmt: skip
    **refused("not available: honing reads files or the Hugging Face hub (hf_hub_url)", "cloud_file_name"),
    **refused("not available: honing does not run a data set's loading script", "script_url"),
}

COLUMNS: dict[str, Entry] = {
    **honoured(
        "alpaca's instruction / input / output / history / system (other names: the source's columns)",
        "prompt",
        "query",
        "response",
        "history",
        "system",
    ),  # fmt: skip
    **honoured("ShareGPT's conversations, or OpenAI-style messages (other names: the source's columns)", "messages"),
    **honoured("preference pairs' chosen / rejected", "chosen", "rejected"),
    **honoured("the images of an mllm row", "images"),
    **honoured("a conversation's tools", "tools"),
    **refused("not available: honing's KTO reads TRL's prompt / completion / label rows", "kto_tag"),
    **refused("not available: honing trains on images only", "videos", "audios"),
}

TAGS: dict[str, Entry] = {
    **honoured(
        "ShareGPT's from / value, or role / content messages (other keys: the source's columns)",
        "role_tag",
        "content_tag",
    ),
    **honoured(
        "the speakers, other names as the source's roles",
        "user_tag",
        "assistant_tag",
        "observation_tag",
        "function_tag",
        "system_tag",
    ),  # fmt: skip
}
