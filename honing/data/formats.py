"""Converters from the common row formats (conversation, alpaca, sharegpt, prompt_completion, text, LLaMA-Factory's
mllm) to the typed training examples of ``honing.data.example_types``, and image paths resolved against a data file's
folder."""

from __future__ import annotations

import base64
import json
import os
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

from honing import storage
from honing.data.example_types import (
    IMAGE_TYPES,
    ROLES,
    ContentItem,
    Conversation,
    Example,
    Message,
    PlainText,
    RowError,
)
from honing.data.named.registry import suggested_datasets
from honing.errors import DataError

EXAMPLE_FORMATS = ("conversation", "alpaca", "sharegpt", "prompt_completion", "text", "mllm")
URL_PREFIXES = ("http://", "https://", "data:", "file://")
# LLaMA-Factory's multimodal files mark where each entry of the row's ``images`` list goes with this placeholder.
IMAGE_PLACEHOLDER = "<image>"

# ShareGPT speaker names (FastChat, LLaMA-Factory) mapped to roles. Tool-side names cover LLaMA-Factory's
# function_call / observation and the OpenAI / Llama-3 spellings; any other name is a bad row, because mapping
# unknown names to "tool" would silently mask a typo such as "humna" out of the loss.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "system": "system",
    "tool": "tool",
    "function_call": "tool",
    "observation": "tool",
    "function": "tool",
    "ipython": "tool",
}


def detect_format(row: dict[str, Any], *, text_field: str = "text") -> str:
    """The row format its keys announce; a ``RowError`` naming the keys found when none matches."""
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {_kind(row)}")
    if "images" in row and ("messages" in row or "conversations" in row or ("instruction" in row and "output" in row)):
        return "mllm"
    if "messages" in row:
        return "conversation"
    if "conversations" in row:
        return "sharegpt"
    if "instruction" in row and "output" in row:
        return "alpaca"
    if "prompt" in row and "completion" in row:
        return "prompt_completion"
    if text_field in row:
        return "text"
    raise RowError(
        f"cannot detect the format from the keys {_keys(row)}; expected 'messages' (conversation), "
        "'conversations' (sharegpt), 'instruction' + 'output' (alpaca), any of them + 'images' (mllm), "
        f"'prompt' + 'completion' (prompt_completion) or {text_field!r} (text)" + suggested_datasets(row)
    )


def to_example(row: dict[str, Any], format: str, *, text_field: str = "text") -> Example:
    """The example a row holds in ``format``; a ``RowError`` saying what is wrong when it does not fit."""
    if format not in EXAMPLE_FORMATS:
        raise DataError(f"unknown example format {format!r}; expected one of: {', '.join(EXAMPLE_FORMATS)}")
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {_kind(row)}")
    if format == "text":
        return _from_text(row, text_field)
    return _CONVERTERS[format](row)


def _from_conversation(row: dict[str, Any]) -> Conversation:
    _no_images_list(row, "conversation")
    messages = _messages(_required(row, "messages"), "messages")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise RowError(f"'metadata' must be an object, got {_kind(metadata)}")
    tools = _tools(row.get("tools"))
    return _with_assistant(Conversation(messages=messages, metadata=metadata, tools=tools), "messages")


def _tools(value: object) -> list[dict[str, Any]] | None:
    """A row's ``tools``: JSON schemas as a list (or that list as a JSON string, as some hub sets store it)."""
    if value is None or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise RowError("'tools' is a string that is not JSON; expected a list of JSON schemas") from None
    if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
        raise RowError(f"'tools' must be a list of JSON schemas (objects), got {_kind(value)}")
    return value or None


def _from_alpaca(row: dict[str, Any]) -> Conversation:
    _no_images_list(row, "alpaca")
    instruction = _string(row, "instruction")
    extra = _optional_string(row, "input")
    output = _string(row, "output")
    messages = []
    system = _optional_string(row, "system")
    if system:
        messages.append(Message(role="system", content=system))
    # LLaMA-Factory's optional multi-turn prefix: [[instruction, response], ...] before the current turn.
    history = row.get("history") or []
    if not isinstance(history, list):
        raise RowError(f"'history' must be a list of [instruction, response] pairs, got {_kind(history)}")
    for index, turn in enumerate(history):
        if not (isinstance(turn, list) and len(turn) == 2 and all(isinstance(part, str) for part in turn)):
            raise RowError(f"history[{index}] must be a pair of strings [instruction, response], got {_kind(turn)}")
        messages += [Message(role="user", content=turn[0]), Message(role="assistant", content=turn[1])]
    user = f"{instruction}\n\n{extra}" if extra else instruction
    messages += [Message(role="user", content=user), Message(role="assistant", content=output)]
    return Conversation(messages=messages)


def _from_sharegpt(row: dict[str, Any]) -> Conversation:
    _no_images_list(row, "sharegpt")
    turns = _required(row, "conversations")
    if not isinstance(turns, list):
        raise RowError(f"'conversations' must be a list of {{'from', 'value'}} objects, got {_kind(turns)}")
    if not turns:
        raise RowError("'conversations' is an empty list; expected at least one message")
    messages = []
    system = _optional_string(row, "system")
    if system:
        messages.append(Message(role="system", content=system))
    for index, turn in enumerate(turns):
        where = f"conversations[{index}]"
        if not isinstance(turn, dict):
            raise RowError(f"{where} must be an object with 'from' and 'value', got {_kind(turn)}")
        speaker = turn.get("from")
        if speaker not in SHAREGPT_ROLES:
            raise RowError(
                f"unknown role {speaker!r} in {where}; expected 'from' to be one of: {', '.join(SHAREGPT_ROLES)}"
            )
        value = turn.get("value")
        if not isinstance(value, str):
            raise RowError(f"'value' must be a string, got {_kind(value)} in {where}")
        messages.append(Message(role=SHAREGPT_ROLES[speaker], content=value))
    return _with_assistant(Conversation(messages=messages), "conversations")


def _from_mllm(row: dict[str, Any]) -> Conversation:
    """LLaMA-Factory's multimodal rows: ``messages`` (or sharegpt ``conversations``, or alpaca ``instruction`` /
    ``output``) whose strings hold ``<image>`` placeholders, filled in order from the row's ``images`` list (paths
    relative to the data file; one image alone as well); Hugging Face's ``{"type": "image"}`` content items take the
    images in the same way. An alpaca row without placeholders shows its images before its first instruction."""
    if row.get("videos") or row.get("audios"):
        raise RowError("'videos' and 'audios' are not supported; mllm rows may hold 'images' only")
    images = row.get("images") or []  # null or absent: a text-only row, which LLaMA-Factory files may mix in
    if isinstance(images, (str, dict)):  # one image: a hub data set's Image column, a path column
        images = [images]
    if not isinstance(images, list):
        raise RowError(f"'images' must be a list of image paths, got {_kind(images)}")
    items = [_mllm_image(image, f"images[{index}]") for index, image in enumerate(images)]
    rest = {key: value for key, value in row.items() if key != "images"}
    key = "messages" if "messages" in row else "conversations" if "conversations" in row else "instruction"
    if key == "messages" and isinstance(rest["messages"], list):
        rest["messages"] = [_placeholders_for_image_items(message) for message in rest["messages"]]
    readers = {"messages": _from_conversation, "conversations": _from_sharegpt, "instruction": _from_alpaca}
    conversation = readers[key](rest)
    placeholders = sum(message.text().count(IMAGE_PLACEHOLDER) for message in conversation.messages)
    if key == "instruction" and not placeholders and items:
        # Oumi's hf_vision and LLaMA-Factory's chat engines: the images lead the (first) user turn
        conversation = _images_first(conversation, len(items))
        placeholders = len(items)
    if placeholders != len(items):
        raise RowError(
            f"row has {placeholders} {IMAGE_PLACEHOLDER} placeholder(s) in {key!r} but {len(items)} image(s) in "
            "'images'; each placeholder takes the next image, so the counts must be equal"
        )
    pending = iter(items)
    messages = []
    for index, message in enumerate(conversation.messages):
        filled = [piece for part in message.items() for piece in _fill_placeholders(part, pending)]
        if any(item.is_image for item in filled) and message.role == "assistant":
            raise RowError(f"{IMAGE_PLACEHOLDER} in an assistant message ({key}[{index}]); images go in the prompt")
        # A message without a placeholder keeps its plain string, as the text formats give it.
        content = message.content if filled == message.items() else filled
        messages.append(Message(role=message.role, content=content))
    return Conversation(messages=messages, metadata=conversation.metadata)


def _images_first(conversation: Conversation, count: int) -> Conversation:
    """``conversation`` with ``count`` placeholders before the text of its first user message."""
    first = next(index for index, message in enumerate(conversation.messages) if message.role == "user")
    messages = list(conversation.messages)
    messages[first] = Message(role="user", content=IMAGE_PLACEHOLDER * count + messages[first].text())
    return conversation.model_copy(update={"messages": messages})


def _placeholders_for_image_items(message: object) -> object:
    """Hugging Face's multimodal messages (``HuggingFaceH4/llava-instruct-mix-vsft``, TRL's VLM rows): content items
    ``{"type": "image"}`` that take the row's next image, and ``{"type": "text", "text": ...}``; as placeholders."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or not any(isinstance(item, dict) and "text" in item for item in content):
        return message
    items = []
    for item in content:
        if isinstance(item, dict) and item.get("type") == "image" and not item.get("content"):
            items.append({"type": "text", "content": IMAGE_PLACEHOLDER})
        elif isinstance(item, dict) and item.get("type") == "text" and "content" not in item:
            items.append({"type": "text", "content": item.get("text")})
        else:
            items.append(item)
    return {**message, "content": items}


def _mllm_image(image: object, where: str) -> ContentItem:
    # Rows read through ``datasets`` hold its Image feature, {"bytes": ..., "path": ...}, instead of a path.
    if isinstance(image, dict) and isinstance(image.get("bytes"), bytes) and image["bytes"]:
        return ContentItem(type="image_base64", content=base64.b64encode(image["bytes"]).decode("ascii"))
    if isinstance(image, dict) and isinstance(image.get("path"), str):
        image = image["path"]
    if not isinstance(image, str) or not image:
        raise RowError(f"{where} must be an image path or URL, got {repr(image) if image == '' else _kind(image)}")
    return ContentItem(type="image_url" if image.startswith(URL_PREFIXES) else "image_path", content=image)


def _fill_placeholders(item: ContentItem, images: Iterator[ContentItem]) -> list[ContentItem]:
    """A text item cut at each placeholder, with the next image in its place; other items as they are."""
    if item.type != "text" or IMAGE_PLACEHOLDER not in item.content:
        return [item]
    pieces = item.content.split(IMAGE_PLACEHOLDER)
    filled = [ContentItem(type="text", content=pieces[0])] if pieces[0] else []
    for piece in pieces[1:]:
        filled.append(next(images))
        if piece:
            filled.append(ContentItem(type="text", content=piece))
    return filled


def _no_images_list(row: dict[str, Any], format: str) -> None:
    # Read as plain conversations, such a row would train on the literal text "<image>" with no image at all.
    if row.get("images"):
        raise RowError(f"row has an 'images' list, which format {format!r} ignores; read it with format 'mllm'")


def _from_prompt_completion(row: dict[str, Any]) -> Conversation:
    prompt, completion = _required(row, "prompt"), _required(row, "completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        return Conversation(
            messages=[Message(role="user", content=prompt), Message(role="assistant", content=completion)]
        )
    if isinstance(prompt, list) and isinstance(completion, list):
        completion_messages = _messages(completion, "completion")
        if not any(message.role == "assistant" for message in completion_messages):
            raise RowError("no assistant message in 'completion'; it holds the reply to learn")
        return Conversation(messages=_messages(prompt, "prompt") + completion_messages)
    raise RowError(
        f"'prompt' and 'completion' must both be strings or both be lists of messages, got "
        f"{_kind(prompt)} and {_kind(completion)}"
    )


def _from_text(row: dict[str, Any], text_field: str) -> PlainText:
    text = _string(row, text_field)
    if not text:
        raise RowError(f"{text_field!r} is an empty string")
    return PlainText(text=text)


_CONVERTERS: dict[str, Callable[[dict[str, Any]], Conversation]] = {
    "conversation": _from_conversation,
    "alpaca": _from_alpaca,
    "sharegpt": _from_sharegpt,
    "prompt_completion": _from_prompt_completion,
    "mllm": _from_mllm,
}


def _messages(value: object, key: str) -> list[Message]:
    if not isinstance(value, list):
        raise RowError(f"{key!r} must be a list of messages, got {_kind(value)}")
    if not value:
        raise RowError(f"{key!r} is an empty list; expected at least one message")
    return [_message(item, f"{key}[{index}]") for index, item in enumerate(value)]


def _message(item: object, where: str) -> Message:
    if not isinstance(item, dict):
        raise RowError(f"{where} must be an object with 'role' and 'content', got {_kind(item)}")
    if "role" not in item:
        raise RowError(f"missing 'role' in {where} (keys: {_keys(item)})")
    role = item["role"]
    if role not in ROLES:
        raise RowError(f"unknown role {role!r} in {where}; expected one of: {', '.join(ROLES)}")
    content = item.get("content")
    tool_parts = _tool_parts(item, role, where)
    if content is None and tool_parts.get("tool_calls"):
        content = ""  # a turn of calls only (OpenAI's and TRL's rows give its content as null)
    if isinstance(content, str):
        return Message(role=role, content=content, **tool_parts)
    if isinstance(content, list):
        items = [_content_item(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
        return Message(role=role, content=items, **tool_parts)
    raise RowError(f"'content' must be a string or a list of content items, got {_kind(content)} in {where}")


def _tool_parts(item: dict[str, Any], role: str, where: str) -> dict[str, Any]:
    """A message's ``tool_calls`` (assistant turns) and ``name`` (tool turns), checked."""
    parts: dict[str, Any] = {}
    calls = item.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise RowError(f"'tool_calls' in a {role!r} message ({where}); only assistant turns make tool calls")
        if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
            raise RowError(f"'tool_calls' must be a list of objects in {where}, got {_kind(calls)}")
        parts["tool_calls"] = calls or None
    name = item.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise RowError(f"'name' must be a string in {where}, got {_kind(name)}")
        parts["name"] = name
    return parts


def _content_item(part: object, where: str) -> ContentItem:
    if not isinstance(part, dict):
        raise RowError(f"{where} must be an object with 'type' and 'content', got {_kind(part)}")
    kind = part.get("type")
    if kind not in ("text",) + IMAGE_TYPES:
        raise RowError(f"unknown content type {kind!r} in {where}; expected one of: text, {', '.join(IMAGE_TYPES)}")
    value = part.get("content")
    # OpenAI-style items, which many chat datasets use: {"type": "text", "text": ...} and
    # {"type": "image_url", "image_url": {"url": ...}}.
    if value is None and kind == "text":
        value = part.get("text")
    if value is None and kind == "image_url":
        value = part.get("image_url")
        value = value.get("url") if isinstance(value, dict) else value
    if not isinstance(value, str):
        raise RowError(f"'content' must be a string, got {_kind(value)} in {where}")
    if kind != "text" and not value:
        expected = "the PDF file's path" if kind == "pdf" else f"the image's {kind[6:]}"
        raise RowError(f"'content' of a {kind} item is empty in {where}; expected {expected}")
    page = part.get("page")  # null (a table column other items lack) means absent
    if page is not None and kind != "pdf":
        raise RowError(f"'page' applies to pdf items only, not to a {kind} item, in {where}")
    if kind == "pdf" and page is not None and (isinstance(page, bool) or not isinstance(page, int) or page < 1):
        raise RowError(f"'page' must be a page number >= 1 (1-based, like pdftoppm), got {page!r} in {where}")
    return ContentItem(type=kind, content=value, page=page)


def _with_assistant(conversation: Conversation, key: str) -> Conversation:
    if not conversation.has_assistant():
        roles = ", ".join(message.role for message in conversation.messages)
        raise RowError(f"no assistant message in {key!r} (roles: {roles}); fine-tuning needs a reply to learn")
    return conversation


def _required(row: dict[str, Any], key: str) -> object:
    if key not in row:
        raise RowError(f"missing key {key!r} (keys: {_keys(row)})")
    return row[key]


def _string(row: dict[str, Any], key: str) -> str:
    value = _required(row, key)
    if not isinstance(value, str):
        raise RowError(f"{key!r} must be a string, got {_kind(value)}")
    return value


def _optional_string(row: dict[str, Any], key: str) -> str:
    # Parquet and datasets tables fill a column a row lacks with null, so null means absent.
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise RowError(f"{key!r} must be a string, got {_kind(value)}")
    return value or ""


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _keys(row: dict[str, Any]) -> str:
    return ", ".join(repr(key) for key in row) or "none"


def resolve_image_paths(conversation: Conversation, folder: str) -> Conversation:
    """The conversation with relative ``image_path`` and ``pdf`` paths joined to ``folder`` (a data file's
    folder, local or fsspec URL); absolute paths and URLs stay as they are."""
    if not any(_is_relative(item) for item in conversation.images()):
        return conversation
    messages = [
        message
        if isinstance(message.content, str)
        else message.model_copy(update={"content": [_resolved(item, folder) for item in message.content]})
        for message in conversation.messages
    ]
    return conversation.model_copy(update={"messages": messages})


def _is_relative(item: ContentItem) -> bool:
    return item.type in ("image_path", "pdf") and "://" not in item.content and not os.path.isabs(item.content)


def _resolved(item: ContentItem, folder: str) -> ContentItem:
    if not _is_relative(item):
        return item
    if storage.is_url(folder):
        protocol, _, root = folder.partition("://")
        return item.model_copy(update={"content": f"{protocol}://{posixpath.normpath(f'{root}/{item.content}')}"})
    return item.model_copy(update={"content": os.path.normpath(os.path.join(folder, item.content))})
