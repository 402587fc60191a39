"""A source's rows in columns of their own, renamed to honing's (``sources[].columns`` / ``roles``): LLaMA-Factory's
``dataset_info`` columns and tags, axolotl's ``field_*`` and ``message_property_mappings``, a hub data set's
``messages_column`` / ``prompt_column``. Applied to each row as it is read, before its format is detected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.errors import DataError

# names inside each message of a conversation (honing's conversation: role / content; sharegpt: from / value)
MESSAGE_KEYS = ("role", "content", "from", "value")
# the columns that hold a list of messages, where MESSAGE_KEYS and roles apply
MESSAGE_LISTS = ("messages", "conversations", "chosen", "rejected", "prompt", "completion")


def check_mapping(value: object, name: str, where: str) -> dict[str, str]:
    """``value`` as a mapping of non-empty names to non-empty names; DataError naming ``where``.``name`` else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and key and isinstance(item, str) and item for key, item in value.items()
    ):
        raise DataError(f"{where}: {name} must map names to names (e.g. {{instruction: question}}), got {value!r}")
    return dict(value)


def mapped_row(row: Any, columns: Mapping[str, str], roles: Mapping[str, str]) -> Any:
    """``row`` with its own columns under honing's names (``columns``: honing's name → the row's), each message's
    keys renamed the same way and its speaker (``role`` or ``from``) renamed by ``roles`` (the row's → honing's)."""
    if not isinstance(row, dict):
        return row  # the format's reader names what is wrong with it
    top = {ours: theirs for ours, theirs in columns.items() if ours not in MESSAGE_KEYS}
    out = {key: value for key, value in row.items() if key not in top.values()}
    out.update({ours: row[theirs] for ours, theirs in top.items() if theirs in row})
    inside = {theirs: ours for ours, theirs in columns.items() if ours in MESSAGE_KEYS}
    if inside or roles:
        for name in MESSAGE_LISTS:
            if isinstance(out.get(name), list):
                out[name] = [_message(message, inside, roles) for message in out[name]]
            elif isinstance(out.get(name), dict):  # one message: a ranked ShareGPT row's chosen / rejected
                out[name] = _message(out[name], inside, roles)
    return out


def _message(message: object, keys: Mapping[str, str], roles: Mapping[str, str]) -> object:
    if not isinstance(message, dict):
        return message
    renamed = {keys.get(key, key): value for key, value in message.items()}
    for speaker in ("role", "from"):
        if isinstance(renamed.get(speaker), str) and renamed[speaker] in roles:
            renamed[speaker] = roles[renamed[speaker]]
    return renamed


def pretraining_text_field(fields: Mapping[str, Any], index: int) -> str:
    """The column a pretraining source's documents are read from: ``columns: {text: NAME}`` or ``text_field``."""
    columns, roles = fields.get("columns") or {}, fields.get("roles") or {}
    other = sorted(set(columns) - {"text"}) + (["roles"] if roles else [])
    if other:
        raise DataError(
            f"data source {index} ({fields['path']!r}): pretraining reads one text column; {', '.join(other)} "
            "cannot be mapped (give columns: {text: NAME} or text_field)"
        )
    return columns.get("text", fields["text_field"])
