"""LLaMA-Factory's ``dataset_info.json`` ``columns`` and ``tags`` as a source's format, ``columns`` and ``roles``
(docs/data.md#column-mappings): rows whose columns or speakers have other names than honing's are renamed as they
are read, not refused."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Keys, Translation

# LLaMA-Factory's alpaca column keys -> honing's alpaca columns (its defaults are honing's names)
ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": "history",
                  "system": "system"}  # fmt: skip
SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value"}
OPENAI_TAGS = {"role_tag": "role", "content_tag": "content"}
# each speaker tag as the speaker name honing's reader of that layout knows
SHAREGPT_SPEAKERS = {"user_tag": "human", "assistant_tag": "gpt", "observation_tag": "observation",
                     "function_tag": "function_call", "system_tag": "system"}  # fmt: skip
OPENAI_SPEAKERS = {"user_tag": "user", "assistant_tag": "assistant", "observation_tag": "tool", "system_tag": "system"}


def mapped(columns: Keys, names: dict[str, str], mapping: dict[str, str]) -> None:
    """Each LLaMA-Factory column key of ``names`` that is given: honing's name -> the row's column in ``mapping``
    (left out where the row already uses honing's name)."""
    for key, ours in names.items():
        given = columns.take(key)
        if given is not None and str(given) != ours:
            mapping[ours] = str(given)


def source_format(fmt: str, columns: dict[str, str], roles: dict[str, str] | None = None) -> dict[str, Any]:
    """A source's ``format`` with its ``columns`` / ``roles`` where it has any."""
    return {"format": fmt, **({"columns": columns} if columns else {}), **({"roles": roles} if roles else {})}


def alpaca_format(t: Translation, columns: Keys, ranking: bool, method: str) -> dict[str, Any] | None:
    """alpaca rows: instruction / input / output (/ history / system); ranked: prompt / chosen / rejected strings;
    columns of other names are mapped."""
    mapping: dict[str, str] = {}
    if ranking:
        mapped(columns, {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}, mapping)
        if columns.has("query"):
            t.refuse(columns.key("query"), "an alpaca input beside a ranked prompt: honing reads prompt / chosen / "
                                           "rejected (preference_prompt)")  # fmt: skip
            return None
        columns.take("query")
        return source_format("preference_prompt", mapping)
    mapped(columns, ALPACA_COLUMNS, mapping)
    if method not in ("sft", "vl_sft"):
        t.refuse(columns.key(""), f"alpaca rows for method {method!r}: not available")
        return None
    return source_format("alpaca", mapping)


def message_format(
    t: Translation, columns: Keys, tags: Keys, ranking: bool, formatting: str, method: str
) -> dict[str, Any] | None:
    """sharegpt / openai rows as honing's ShareGPT ``conversations`` (from / value) or ``messages`` (role /
    content), their columns, message keys and speakers mapped; with ``images`` mllm; ranked: their preference
    formats."""
    default_tags = SHAREGPT_TAGS if formatting == "sharegpt" else OPENAI_TAGS
    role_key, content_key = (str(tags.take(tag, default_tags[tag])) for tag in ("role_tag", "content_tag"))
    # the message keys say which of honing's readers: ShareGPT's from / value, or messages' role / content
    sharegpt = (role_key, content_key) == ("from", "value") or (
        formatting == "sharegpt" and (role_key, content_key) != ("role", "content")
    )
    list_name, ours_keys = ("conversations", ("from", "value")) if sharegpt else ("messages", ("role", "content"))
    mapping: dict[str, str] = {}
    given = str(columns.take("messages", "conversations" if formatting == "sharegpt" else "messages"))
    if given != list_name:
        mapping[list_name] = given
    for ours, theirs in zip(ours_keys, (role_key, content_key)):
        if theirs != ours:
            mapping[ours] = theirs
    speakers = SHAREGPT_SPEAKERS if sharegpt else OPENAI_SPEAKERS
    roles: dict[str, str] = {}
    for tag in SHAREGPT_SPEAKERS:
        speaker = tags.take(tag)
        if tag not in speakers:  # a function-call turn: ShareGPT's layout only
            if speaker is not None:
                t.refuse(tags.key(tag), f"{speaker!r}: function-call turns are read from rows of from / value keys")
                return None
            continue
        if speaker is None:  # rows in the reader's own speakers (as the translation read them before)
            continue
        theirs = str(speaker)
        if theirs != speakers[tag]:
            roles[theirs] = speakers[tag]
    images, tools, system = columns.take("images"), columns.take("tools"), columns.take("system")
    if tools is not None and sharegpt:
        t.refuse(columns.key("tools"), "honing reads a tools column beside messages of role / content keys")
    if system is not None and not sharegpt:
        t.refuse(columns.key("system"), "honing reads a system column beside ShareGPT's conversations only")
    for ours, theirs in (("images", images), ("tools", tools), ("system", system)):
        if theirs is not None and str(theirs) != ours:
            mapping[ours] = str(theirs)
    if ranking:
        mapped(columns, {"chosen": "chosen", "rejected": "rejected"}, mapping)
        return source_format("preference_sharegpt" if sharegpt else "preference", mapping, roles)
    if images is not None:
        return source_format("mllm", mapping, roles)
    if method not in ("sft", "vl_sft"):
        t.refuse(columns.key("messages"), f"conversations for method {method!r}: not available (ranking: true?)")
        return None
    return source_format("sharegpt" if sharegpt else "conversation", mapping, roles)
