"""Image conversations from a data set's own columns: alpaca rows with ``images`` (a list or one image), the image
before the instruction unless an ``<image>`` placeholder says where, reached through ``sources[].columns``."""

from __future__ import annotations

import io
import math

import pytest
from PIL import Image

from honing.data.column_mapping import mapped_row
from honing.data.formats import ContentItem, RowError, detect_format, to_example
from tests.recipes.test_vl_sft import draw, losses, vl_config


def image(path: str) -> ContentItem:
    return ContentItem(type="image_path", content=path)


def text(value: str) -> ContentItem:
    return ContentItem(type="text", content=value)


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "white").save(buffer, format="PNG")
    return buffer.getvalue()


def test_alpaca_rows_with_images_show_them_before_the_instruction():
    row = {"instruction": "What is drawn?", "input": "Be brief.", "output": "A cat.", "images": ["a.png", "b.png"]}
    assert detect_format(row) == "mllm"
    convo = to_example(row, "mllm")
    assert [m.role for m in convo.messages] == ["user", "assistant"]
    assert convo.messages[0].content == [image("a.png"), image("b.png"), text("What is drawn?\n\nBe brief.")]
    assert convo.messages[1].content == "A cat."


def test_a_placeholder_says_where_the_image_goes_and_history_keeps_it_on_the_first_turn():
    placed = to_example({"instruction": "Compare <image> with that.", "output": "Same.", "images": ["a.png"]}, "mllm")
    assert placed.messages[0].content == [text("Compare "), image("a.png"), text(" with that.")]
    row = {"instruction": "And now?", "output": "Two.", "history": [["Count.", "One."]], "images": ["a.png"]}
    first = to_example(row, "mllm").messages[0]  # the images lead the conversation's first user turn
    assert first.content == [image("a.png"), text("Count.")]


def test_one_image_where_a_list_is_expected():
    assert to_example({"instruction": "Read.", "output": "x", "images": "p.png"}, "mllm").images() == [image("p.png")]
    convo = to_example({"instruction": "Read.", "output": "x", "images": {"bytes": b"\x89PNG", "path": None}}, "mllm")
    assert convo.images() == [ContentItem(type="image_base64", content="iVBORw==")]
    chat = {"messages": [{"role": "user", "content": "<image>Hi"}, {"role": "assistant", "content": "Yo"}]}
    assert to_example({**chat, "images": "q.png"}, "mllm").images() == [image("q.png")]


def test_alpaca_format_refuses_images_it_would_drop():
    with pytest.raises(RowError, match="read it with format 'mllm'"):
        to_example({"instruction": "Read.", "output": "x", "images": ["p.png"]}, "alpaca")


def test_own_columns_map_onto_an_image_conversation():
    row = {"problem": "Which digit?", "solution": "7", "image": {"bytes": b"\x89PNG", "path": None}, "id": 3}
    mapped = mapped_row(row, {"images": "image", "instruction": "problem", "output": "solution"}, {})
    assert mapped == {"id": 3, "images": row["image"], "instruction": "Which digit?", "output": "7"}
    convo = to_example(mapped, detect_format(mapped))
    assert convo.messages[0].content == [ContentItem(type="image_base64", content="iVBORw=="), text("Which digit?")]


def test_vl_sft_trains_on_rows_in_their_own_columns(tmp_path):
    """A Parquet table in a hub data set's columns (an Image-feature cell, a question, an answer) trains a tiny VL
    model through ``columns``: every row keeps its image."""
    pyarrow = pytest.importorskip("pyarrow")
    from pyarrow import parquet

    from honing.recipes.vl_sft import VLSFTRecipe

    rows = []
    for index in range(4):
        path = draw(tmp_path / f"d{index}.png", str(index), (56, 28))
        rows.append({"picture": {"bytes": path.read_bytes(), "path": None}, "ask": "Which digit?", "say": str(index)})
    parquet.write_table(pyarrow.Table.from_pylist(rows), tmp_path / "digits.parquet")
    source = {"path": str(tmp_path / "digits.parquet"), "columns": {"images": "picture", "instruction": "ask",
                                                                       "output": "say"}}  # fmt: skip
    recipe = VLSFTRecipe(vl_config(tmp_path, "unused", data={"train": {"sources": [source]}}))
    trainer = recipe.run()
    report = recipe.data_reports["train"]
    assert report.rejected == 0 and report.examples == 4 and report.images_per_example == [1, 1, 1, 1]
    assert trainer.global_step == 2 and all(math.isfinite(loss) for loss in losses(tmp_path / "run").values())
