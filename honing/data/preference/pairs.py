"""Preference pairs (a prompt, a chosen and a rejected completion) read from the formats DPO users bring.

- ``preference``: Oumi's ``messages`` (the prompt) plus ``chosen`` / ``rejected``;
- ``preference_prompt``: TRL's ``prompt`` / ``chosen`` / ``rejected``, conversational (lists of messages) or plain
  strings (then the prompt is one user message and each completion one assistant message); conversations that hold
  the prompt beside a string ``prompt`` column give their shared messages as the prompt, as TRL reads them;
- ``preference_sharegpt``: LLaMA-Factory's ``conversations`` (``from`` / ``value``) plus ``chosen`` / ``rejected``;
- ``preference_transcript``: Anthropic HH-RLHF's full ``chosen`` / ``rejected`` transcripts
  (``"\\n\\nHuman: ... \\n\\nAssistant: ..."``), split at the last ``"\\n\\nAssistant:"`` the two share.

A completion is a string, one assistant message, or a list of messages. A row whose completion is empty, or
whose chosen and rejected are the same, is a bad row (``data.bad_rows``), as is any row that fits no format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from math import inf
from typing import Any

from honing.data.formats import ROLES, SHAREGPT_ROLES, RowError
from honing.data.row_reader import (
    BadRowReport,
    BadRows,
    RowItems,
    SourceFormat,
    SourceKind,
    named_format,
    read_items,
    weighted_items,
)
from honing.errors import DataError

PREFERENCE_FORMATS = ("preference", "preference_prompt", "preference_sharegpt", "preference_transcript")
HUMAN, ASSISTANT = "\n\nHuman:", "\n\nAssistant:"

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class PreferencePair:
    """A prompt (messages ending before the reply) and two replies to it, the chosen one preferred."""

    prompt: Messages
    chosen: Messages
    rejected: Messages
    margin: float | None = None  # a reward model's target margin (TRL's ``margin`` column); the other methods ignore it


@dataclass
class PairSet:
    """The pairs of every source after weighting, each pair's origin (file:line), and the bad rows skipped."""

    pairs: list[PreferencePair]
    origins: list[str]
    report: BadRowReport


def detect_preference_format(row: Mapping[str, Any]) -> str:
    """The preference format a row's keys announce; a ``RowError`` naming the keys found when none matches."""
    if "chosen" in row and "rejected" in row:
        if "messages" in row:
            return "preference"
        if "prompt" in row:
            return "preference_prompt"
        if "conversations" in row:
            return "preference_sharegpt"
        return "preference_transcript"
    keys = ", ".join(repr(key) for key in row) or "none"
    raise RowError(
        f"cannot detect a preference format from the keys {keys}; expected 'chosen' and 'rejected' with "
        "'messages' (preference), 'prompt' (preference_prompt), 'conversations' (preference_sharegpt), "
        "or alone as full transcripts (preference_transcript)"
    )


def to_pair(row: Mapping[str, Any], format: str) -> PreferencePair:
    """The pair a row holds in ``format``; a ``RowError`` saying what is wrong when it does not fit."""
    if format not in PREFERENCE_FORMATS:
        raise DataError(f"unknown preference format {format!r}; expected one of: {', '.join(PREFERENCE_FORMATS)}")
    for key in ("chosen", "rejected"):
        if key not in row:
            raise RowError(f"missing key {key!r} (keys: {', '.join(repr(k) for k in row) or 'none'})")
    if format == "preference_transcript":
        pair = _from_transcripts(row["chosen"], row["rejected"])
    else:
        if format == "preference":
            prompt = _messages(row.get("messages"), "messages")
        elif format == "preference_sharegpt":
            prompt = _sharegpt(row.get("conversations"), "conversations", system=row.get("system"))
        elif _holds_prompt(row["chosen"]) and not isinstance(row.get("prompt"), list):
            # TRL's implicit prompt beside a plain-string prompt column (mlabonne/orpo-dpo-mix-40k, which Oumi's DPO
            # recipes name): TRL reads the prompt from the conversations, as here
            return _checked(_with_margin(_from_conversations(row["chosen"], row["rejected"]), row.get("margin")))
        else:
            prompt = _prompt(row.get("prompt"))
        pair = PreferencePair(prompt, _completion(row["chosen"], "chosen"), _completion(row["rejected"], "rejected"))
    return _checked(_with_margin(pair, row.get("margin")))


def _holds_prompt(value: object) -> bool:
    """True for a conversation that starts before the assistant's reply (TRL's implicit-prompt completions)."""
    return (
        isinstance(value, list)
        and bool(value)
        and isinstance(value[0], Mapping)
        and value[0].get("role") not in (None, "assistant")
    )


def _from_conversations(chosen: object, rejected: object) -> PreferencePair:
    """TRL's implicit prompt: whole conversations, the prompt being the messages the two share (``extract_prompt``)."""
    chosen, rejected = _messages(chosen, "chosen"), _messages(rejected, "rejected")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == 0 or shared == len(chosen) or shared == len(rejected):
        raise RowError("'chosen' and 'rejected' hold no shared prompt followed by two replies (TRL's implicit prompt)")
    return PreferencePair(
        chosen[:shared], _completion(chosen[shared:], "chosen"), _completion(rejected[shared:], "rejected")
    )


def _pair_items(fields: dict[str, Any], index: int) -> RowItems[PreferencePair]:
    """A source's row → its pair, in the source's format (named, or the first row's: as for fine-tuning rows)."""
    format = SourceFormat(named_format(fields, index, PREFERENCE_FORMATS, "preference pairs"), detect_preference_format)
    return lambda record: [to_pair(record.row, format.of(record))]


#: preference pairs, read from any of ``PREFERENCE_FORMATS``
PAIRS = SourceKind("preference pairs", ("preference pairs",), _pair_items)


def read_pair_sources(
    sources: Sequence[Mapping[str, Any] | object], *, bad_rows: BadRows = "fail"
) -> tuple[list[list[tuple[PreferencePair, str]]], BadRowReport]:
    """Each source's ``(pair, origin)`` once, in file order (at most ``max_samples``), and the bad rows skipped;
    weights are not applied (``load_pairs`` and prepared rows apply them)."""
    return read_items(sources, PAIRS, bad_rows=bad_rows)


def load_pairs(sources: Sequence[Mapping[str, Any] | object], *, seed: int = 0, bad_rows: BadRows = "fail") -> PairSet:
    """The pairs of every source in order, each repeated by its weight as ``load_examples`` does; a bad row fails
    with its file:line, or (``bad_rows: skip``) is counted and reported."""
    found, report = read_pair_sources(sources, bad_rows=bad_rows)
    weighted = weighted_items(sources, found, seed=seed)
    return PairSet([pair for pair, _ in weighted], [origin for _, origin in weighted], report)


# ---- row readers --------------------------------------------------------------------------------------------


def _checked(pair: PreferencePair) -> PreferencePair:
    for name in ("chosen", "rejected"):
        if not any(message["content"].strip() for message in getattr(pair, name)):
            raise RowError(f"the {name} completion is empty; a pair needs two non-empty replies")
    if pair.chosen == pair.rejected:
        raise RowError("chosen and rejected are the same; a pair needs two different replies")
    return pair


def _with_margin(pair: PreferencePair, margin: object) -> PreferencePair:
    if margin is None:
        return pair
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin != margin or abs(margin) == inf:
        raise RowError(f"'margin' must be a finite number, got {margin!r}")
    return replace(pair, margin=float(margin))


def _prompt(value: object) -> Messages:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return _messages(value, "prompt")


def _completion(value: object, key: str) -> Messages:
    """A string, one message (``role`` / ``content`` or ShareGPT's ``from`` / ``value``), a list of messages, or a
    conversation ``{"messages": [...]}`` (Oumi's documented DPO rows)."""
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, Mapping) and "messages" in value and "role" not in value:
        return _completion(value["messages"], f"{key}.messages")
    if isinstance(value, Mapping):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(item, Mapping) and "from" in item for item in value):
        messages = _sharegpt(value, key)
    else:
        messages = _messages(value, key)
    if messages[0]["role"] != "assistant":
        raise RowError(f"{key}[0] has role {messages[0]['role']!r}; a completion starts with the assistant's reply")
    return messages


def _messages(value: object, key: str) -> Messages:
    if not isinstance(value, list) or not value:
        raise RowError(f"{key!r} must be a non-empty list of messages, got {_kind(value)}")
    messages = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(item, Mapping) or "role" not in item:
            raise RowError(f"{where} must be an object with 'role' and 'content', got {_kind(item)}")
        if item["role"] not in ROLES:
            raise RowError(f"unknown role {item['role']!r} in {where}; expected one of: {', '.join(ROLES)}")
        messages.append({"role": item["role"], "content": _text(item.get("content"), where)})
    return messages


def _sharegpt(value: object, key: str, *, system: object = None) -> Messages:
    if not isinstance(value, list) or not value:
        raise RowError(f"{key!r} must be a non-empty list of {{'from', 'value'}} objects, got {_kind(value)}")
    messages = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
    for index, turn in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(turn, Mapping) or turn.get("from") not in SHAREGPT_ROLES:
            speaker = turn.get("from") if isinstance(turn, Mapping) else None
            raise RowError(f"unknown role {speaker!r} in {where}; expected one of: {', '.join(SHAREGPT_ROLES)}")
        messages.append({"role": SHAREGPT_ROLES[turn["from"]], "content": _text(turn.get("value"), where)})
    return messages


def _text(content: object, where: str) -> str:
    """A message's text: a string, or the text items of a list of content items (images are refused)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind != "text":
                raise RowError(f"{where} has a {kind!r} content item; preference pairs are text only")
            parts.append(part.get("content", part.get("text")))
        if all(isinstance(part, str) for part in parts):
            return " ".join(parts)
    raise RowError(f"'content' must be a string or a list of text items, got {_kind(content)} in {where}")


def _from_transcripts(chosen: object, rejected: object) -> PreferencePair:
    """HH-RLHF: the prompt is the transcript up to the last ``Assistant:`` both share; the rest are the replies."""
    if not (isinstance(chosen, str) and isinstance(rejected, str)):
        raise RowError(f"'chosen' and 'rejected' must be transcript strings, got {_kind(chosen)} and {_kind(rejected)}")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    # Some transcripts differ before their last turn (the replies then hold several turns): the prompt ends at
    # the last assistant marker inside the common part, so both replies answer the same prompt.
    cut = chosen.rfind(ASSISTANT, 0, shared)
    if cut < 0:
        raise RowError(f"no {ASSISTANT.strip()!r} turn shared by 'chosen' and 'rejected'; expected HH-RLHF transcripts")
    prompt = _transcript_turns(chosen[:cut])
    if not prompt:
        raise RowError(f"no {HUMAN.strip()!r} turn before the reply; expected HH-RLHF transcripts")
    start = cut + len(ASSISTANT)
    return PreferencePair(
        prompt,
        [{"role": "assistant", "content": chosen[start:].strip()}],
        [{"role": "assistant", "content": rejected[start:].strip()}],
    )


def _transcript_turns(text: str) -> Messages:
    """``"\\n\\nHuman: a\\n\\nAssistant: b"`` → a user and an assistant message."""
    turns: Messages = []
    position = 0
    while True:
        starts = [(text.find(marker, position), marker) for marker in (HUMAN, ASSISTANT)]
        found = [(start, marker) for start, marker in starts if start >= 0]
        if not found:
            break
        start, marker = min(found)
        if turns:
            turns[-1]["content"] = text[position:start].strip()
        turns.append({"role": "user" if marker == HUMAN else "assistant", "content": ""})
        position = start + len(marker)
    if turns:
        turns[-1]["content"] = text[position:].strip()
    return turns


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
