"""Tests for honing/data/formats.py: the Conversation model and the row-format converters."""

from __future__ import annotations

import pydantic
import pytest

from honing.data.formats import (
    ContentItem,
    Conversation,
    Message,
    PlainText,
    RowError,
    detect_format,
    to_example,
)
from honing.errors import DataError


def conversation(*turns: tuple[str, str]) -> Conversation:
    return Conversation(messages=[Message(role=role, content=content) for role, content in turns])


def test_message_text_and_images_from_content_items():
    message = Message(
        role="user",
        content=[
            ContentItem(type="text", content="What is"),
            ContentItem(type="image_path", content="cat.jpg"),
            ContentItem(type="text", content="this?"),
        ],
    )
    assert message.text() == "What is this?"
    assert message.text(separator="\n") == "What is\nthis?"
    assert message.images() == [ContentItem(type="image_path", content="cat.jpg")]
    assert Message(role="assistant", content="plain").text() == "plain"


def test_conversation_hf_messages_images_and_assistant():
    convo = Conversation(
        messages=[
            Message(role="system", content="Be brief."),
            Message(
                role="user",
                content=[
                    ContentItem(type="image_url", content="http://x/a.png"),
                    ContentItem(type="text", content="Describe."),
                ],
            ),
            Message(role="assistant", content="A cat."),
        ],
        metadata={"id": 7},
    )
    assert convo.images() == [ContentItem(type="image_url", content="http://x/a.png")]
    assert convo.has_assistant() and convo.metadata == {"id": 7}
    assert not conversation(("user", "hi")).has_assistant()
    text_only = Conversation(
        messages=[
            Message(role="system", content="Be brief."),
            Message(
                role="user",
                content=[ContentItem(type="text", content="Describe"), ContentItem(type="text", content="this.")],
            ),
            Message(role="assistant", content="A cat."),
        ]
    )
    assert text_only.to_hf_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Describe this."},
        {"role": "assistant", "content": "A cat."},
    ]


@pytest.mark.parametrize("kind", ["image_url", "image_path", "image_base64"])
def test_image_content_is_an_error_for_text_training_not_dropped(kind):
    convo = Conversation(
        messages=[
            Message(
                role="user",
                content=[ContentItem(type="text", content="Describe."), ContentItem(type=kind, content="cat.png")],
            ),
            Message(role="assistant", content="A cat."),
        ]
    )
    with pytest.raises(DataError) as info:
        convo.to_hf_messages()
    message = str(info.value)
    assert f"row has image content ({kind} in messages[0])" in message
    assert "text SFT cannot train on images" in message and "use method: vl_sft" in message
    assert "\n" not in message


def test_conversation_validation_errors():
    with pytest.raises(pydantic.ValidationError, match="at least one message"):
        Conversation(messages=[])
    with pytest.raises(pydantic.ValidationError, match="role"):
        Message(role="bot", content="hi")
    with pytest.raises(pydantic.ValidationError, match="type"):
        ContentItem(type="audio", content="x.wav")


def test_conversation_format_with_metadata_and_openai_content_items():
    row = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hi"},
                    {"type": "image_url", "image_url": {"url": "http://x/a.png"}},
                ],
            },
            {"role": "assistant", "content": "Hello"},
        ],
        "metadata": {"source": "unit"},
    }
    assert to_example(row, "conversation") == Conversation(
        messages=[
            Message(
                role="user",
                content=[
                    ContentItem(type="text", content="Hi"),
                    ContentItem(type="image_url", content="http://x/a.png"),
                ],
            ),
            Message(role="assistant", content="Hello"),
        ],
        metadata={"source": "unit"},
    )


def test_alpaca_with_and_without_input_and_system():
    assert to_example({"instruction": "Add.", "input": "2 and 3", "output": "5"}, "alpaca") == conversation(
        ("user", "Add.\n\n2 and 3"), ("assistant", "5")
    )
    assert to_example({"instruction": "Say hi.", "input": "", "output": "hi"}, "alpaca") == conversation(
        ("user", "Say hi."), ("assistant", "hi")
    )
    assert to_example(
        {"instruction": "Say hi.", "output": "hi", "input": None, "system": "Be kind."}, "alpaca"
    ) == conversation(("system", "Be kind."), ("user", "Say hi."), ("assistant", "hi"))


def test_alpaca_history_comes_before_the_current_turn():
    row = {"instruction": "And 3+3?", "output": "6", "history": [["2+2?", "4"]]}
    assert to_example(row, "alpaca") == conversation(
        ("user", "2+2?"), ("assistant", "4"), ("user", "And 3+3?"), ("assistant", "6")
    )


def test_sharegpt_with_system_and_tool_roles():
    row = {
        "id": "x",
        "system": "You are terse.",
        "conversations": [
            {"from": "human", "value": "Weather?"},
            {"from": "function_call", "value": '{"name": "weather"}'},
            {"from": "observation", "value": "sunny"},
            {"from": "gpt", "value": "Sunny."},
        ],
    }
    assert to_example(row, "sharegpt") == conversation(
        ("system", "You are terse."),
        ("user", "Weather?"),
        ("tool", '{"name": "weather"}'),
        ("tool", "sunny"),
        ("assistant", "Sunny."),
    )


def test_prompt_completion_strings_and_message_lists():
    assert to_example({"prompt": "2+2=", "completion": "4"}, "prompt_completion") == conversation(
        ("user", "2+2="), ("assistant", "4")
    )
    row = {
        "prompt": [{"role": "system", "content": "Math."}, {"role": "user", "content": "2+2="}],
        "completion": [{"role": "assistant", "content": "4"}],
    }
    assert to_example(row, "prompt_completion") == conversation(
        ("system", "Math."), ("user", "2+2="), ("assistant", "4")
    )


def test_text_with_default_and_custom_field():
    assert to_example({"text": "hello", "id": 1}, "text") == PlainText(text="hello")
    assert to_example({"body": "world"}, "text", text_field="body") == PlainText(text="world")


@pytest.mark.parametrize(
    "row, expected",
    [
        ({"messages": [], "text": "x"}, "conversation"),
        ({"conversations": [], "id": "1"}, "sharegpt"),
        ({"instruction": "i", "input": "", "output": "o"}, "alpaca"),
        ({"prompt": "p", "completion": "c"}, "prompt_completion"),
        ({"text": "t", "meta": 1}, "text"),
    ],
)
def test_detect_format(row, expected):
    assert detect_format(row) == expected


def test_detect_format_custom_text_field_and_error_names_keys():
    assert detect_format({"body": "x"}, text_field="body") == "text"
    with pytest.raises(
        RowError,
        match=r"cannot detect the format from the keys 'question', 'answer'; "
        r"expected 'messages' \(conversation\).*'text' \(text\)",
    ):
        detect_format({"question": "q", "answer": "a"})


@pytest.mark.parametrize(
    "row, format, reason",
    [
        (
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "bot", "content": "c"},
                ]
            },
            "conversation",
            "unknown role 'bot' in messages[2]; expected one of: system, user, assistant, tool",
        ),
        ({"instruction": "i", "output": 3}, "alpaca", "'output' must be a string, got int"),
        ({"instruction": "i", "input": ["x"], "output": "o"}, "alpaca", "'input' must be a string, got list"),
        ({"output": "o"}, "alpaca", "missing key 'instruction' (keys: 'output')"),
        (
            {"messages": [{"role": "user", "content": "a"}]},
            "conversation",
            "no assistant message in 'messages' (roles: user); fine-tuning needs a reply to learn",
        ),
        (
            {"messages": [{"role": "user", "content": 5}]},
            "conversation",
            "'content' must be a string or a list of content items, got int in messages[0]",
        ),
        ({"messages": [{"content": "a"}]}, "conversation", "missing 'role' in messages[0] (keys: 'content')"),
        ({"messages": "hi"}, "conversation", "'messages' must be a list of messages, got str"),
        (
            {"messages": [{"role": "user", "content": [{"type": "audio", "content": "a.wav"}]}]},
            "conversation",
            "unknown content type 'audio' in messages[0].content[0]; expected one of: text, image_url, image_path, "
            "image_base64, pdf",
        ),
        (
            {"conversations": [{"from": "human", "value": "a"}, {"from": "bot", "value": "b"}]},
            "sharegpt",
            "unknown role 'bot' in conversations[1]; expected 'from' to be one of: human, user, gpt, assistant, "
            "chatgpt, system, tool, function_call, observation, function, ipython",
        ),
        (
            {"conversations": [{"from": "human", "value": None}]},
            "sharegpt",
            "'value' must be a string, got null in conversations[0]",
        ),
        (
            {"conversations": [{"from": "human", "value": "a"}]},
            "sharegpt",
            "no assistant message in 'conversations' (roles: user); fine-tuning needs a reply to learn",
        ),
        (
            {"prompt": "p", "completion": [{"role": "assistant", "content": "c"}]},
            "prompt_completion",
            "'prompt' and 'completion' must both be strings or both be lists of messages, got str and list",
        ),
        (
            {"prompt": [{"role": "user", "content": "p"}], "completion": [{"role": "user", "content": "c"}]},
            "prompt_completion",
            "no assistant message in 'completion'; it holds the reply to learn",
        ),
        ({"text": 12}, "text", "'text' must be a string, got int"),
        ({"text": ""}, "text", "'text' is an empty string"),
        (["not", "a", "row"], "text", "expected a JSON object, got list"),
    ],
)
def test_bad_rows_raise_row_error_with_reason(row, format, reason):
    with pytest.raises(RowError) as caught:
        to_example(row, format)
    assert caught.value.reason == reason and str(caught.value) == reason
    assert isinstance(caught.value, DataError)


def test_unknown_format_is_a_data_error_not_a_row_error():
    with pytest.raises(
        DataError,
        match="unknown example format 'chatml'; expected one of: conversation, alpaca, "
        "sharegpt, prompt_completion, text",
    ) as caught:
        to_example({"text": "x"}, "chatml")
    assert not isinstance(caught.value, RowError)
