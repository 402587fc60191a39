"""Public Alpaca and ShareGPT files (../shared/data, not part of the repository) load with no rejected rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from honing.data.formats import Conversation, Message
from honing.data.row_reader import load_examples

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_file(relative: str) -> str:
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared data sets live beside the repository, not in it")
    return str(path)


def test_alpaca_demo_loads_every_row():
    path = shared_file("alpaca_demo/alpaca_en_demo.json")
    result = load_examples([{"path": path}], bad_rows="fail")
    assert len(result.examples) == 999 and result.report.count == 0
    assert result.origins[0] == f"{path}[0]" and result.origins[-1] == f"{path}[998]"
    first = result.examples[0]
    assert first.messages[0] == Message(role="user", content="Describe a process of making crepes.")
    assert first.messages[1].text().startswith("Making crepes is an easy and delicious process!")
    # Row 5 is the first with a non-empty input, which follows the instruction after a blank line.
    assert result.examples[5].messages[0].text() == (
        "Given the parameters of a triangle, find out its perimeter.\n\nSide 1 = 4\nSide 2 = 6\nSide 3 = 8"
    )
    assert all(len(example.messages) == 2 for example in result.examples)


def test_sharegpt_demo_loads_every_row():
    path = shared_file("sharegpt_demo/dummy_conversation.json")
    result = load_examples([{"path": path}], bad_rows="fail")
    assert len(result.examples) == 500 and result.report.count == 0
    assert result.examples[1] == Conversation(
        messages=[
            Message(role="user", content="Who are you?"),
            Message(
                role="assistant",
                content="My name is Vicuna, and I'm a language model developed by Large Model "
                "Systems Organization (LMSYS).",
            ),
        ]
    )
    roles = Counter(message.role for example in result.examples for message in example.messages)
    assert roles == {"user": 1000, "assistant": 1000}
