"""LLaMA-Factory's multimodal format (``format: mllm``), pdf content items and messages for a processor's template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from honing.data.formats import ContentItem, Conversation, Message, RowError, detect_format, to_example
from honing.data.row_reader import load_examples
from honing.data.vision.images import check_images, load_image
from honing.errors import DataError

SHARED_DEMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mllm_demo" / "mllm_demo.json"


def image(path: str) -> ContentItem:
    return ContentItem(type="image_path", content=path)


def text(value: str) -> ContentItem:
    return ContentItem(type="text", content=value)


def mllm_row(*contents: str, images: list) -> dict:
    roles = ["user", "assistant"] * len(contents)
    return {"messages": [{"role": r, "content": c} for r, c in zip(roles, contents)], "images": images}


def test_placeholders_become_image_items_in_order():
    row = mllm_row(
        "<image>Who are they?", "Players.", "Compare <image> and<image>", "Same.", images=["1.jpg", "a/2.jpg", "3.jpg"]
    )
    assert detect_format(row) == "mllm"
    convo = to_example(row, "mllm")
    assert convo.messages[0].content == [image("1.jpg"), text("Who are they?")]
    assert convo.messages[1].content == "Players."  # no placeholder: the plain string, as text formats give it
    assert convo.messages[2].content == [text("Compare "), image("a/2.jpg"), text(" and"), image("3.jpg")]
    assert [item.content for item in convo.images()] == ["1.jpg", "a/2.jpg", "3.jpg"]


def test_sharegpt_style_rows_urls_and_datasets_image_dicts():
    row = {
        "conversations": [{"from": "human", "value": "<image><image>Same?"}, {"from": "gpt", "value": "Yes."}],
        "system": "Look closely.",
        "images": ["https://x/a.png", {"bytes": b"\x89PNG", "path": None}],
    }
    assert detect_format(row) == "mllm"
    convo = to_example(row, "mllm")
    assert [m.role for m in convo.messages] == ["system", "user", "assistant"]
    assert convo.messages[1].content == [
        ContentItem(type="image_url", content="https://x/a.png"),
        ContentItem(type="image_base64", content="iVBORw=="),
        text("Same?"),
    ]
    assert to_example({**row, "images": [{"path": "p.png"}, "q.png"]}, "mllm").images() == [
        image("p.png"),
        image("q.png"),
    ]


def test_rows_without_images_read_as_text_conversations():
    row = mllm_row("Hi", "Hello", images=[])
    assert to_example(row, "mllm") == Conversation(
        messages=[Message(role="user", content="Hi"), Message(role="assistant", content="Hello")]
    )
    assert to_example({"messages": row["messages"]}, "mllm") == to_example(row, "mllm")


@pytest.mark.parametrize(
    "row, reason",
    [
        (
            mllm_row("<image>a<image>", "b", images=["1.jpg"]),
            "row has 2 <image> placeholder(s) in 'messages' but 1 image(s) in 'images'",
        ),
        (mllm_row("a", "b", images=["1.jpg"]), "row has 0 <image> placeholder(s) in 'messages' but 1 image(s)"),
        (mllm_row("a", "<image>b", images=["1.jpg"]), "<image> in an assistant message (messages[1])"),
        (mllm_row("<image>", "b", images=7), "'images' must be a list of image paths, got int"),  # one path is read
        (mllm_row("<image>", "b", images=[3]), "images[0] must be an image path or URL, got int"),
        ({**mllm_row("a", "b", images=[]), "videos": ["v.mp4"]}, "'videos' and 'audios' are not supported"),
        (mllm_row("a", images=[]), "no assistant message in 'messages'"),
    ],
)
def test_bad_mllm_rows(row, reason):
    with pytest.raises(RowError) as info:
        to_example(row, "mllm")
    assert reason in info.value.reason


def test_placeholder_rows_under_another_format_are_refused_not_trained_as_text(tmp_path):
    row = mllm_row("<image>Hi", "Hello", images=["1.jpg"])
    with pytest.raises(RowError, match="row has an 'images' list, which format 'conversation' ignores"):
        to_example(row, "conversation")
    # a LLaMA-Factory file whose first rows have no images: the hint says to name the format
    path = tmp_path / "mixed.jsonl"
    text_only = {"messages": mllm_row("Hi", "Yo", images=[])["messages"]}
    path.write_text(json.dumps(text_only) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"mixed.jsonl:2: row is in format 'mllm'.*set the source's format: mllm"):
        load_examples([{"path": str(path)}])
    loaded = load_examples([{"path": str(path), "format": "mllm"}])
    assert loaded.examples[1].images() == [image(str(tmp_path / "1.jpg"))]


def test_image_paths_are_relative_to_the_data_file(tmp_path):
    folder = tmp_path / "set"
    (folder / "pics").mkdir(parents=True)
    Image.new("RGB", (4, 4), "red").save(folder / "pics" / "a.png")
    Image.new("RGB", (4, 4), "blue").save(tmp_path / "b.png")
    rows = [
        mllm_row("<image>a", "x", images=["pics/a.png"]),
        mllm_row("<image>b", "y", images=["../b.png"]),
        mllm_row("<image>c", "z", images=[str(tmp_path / "b.png")]),
    ]
    (folder / "rows.json").write_text(json.dumps(rows))
    loaded = load_examples([{"path": str(folder / "rows.json")}], check_images=check_images)
    paths = [example.images()[0].content for example in loaded.examples]
    assert paths == [str(folder / "pics" / "a.png"), str(tmp_path / "b.png"), str(tmp_path / "b.png")]
    assert loaded.origins == [f"{folder}/rows.json[{i}]" for i in range(3)]


def test_pdf_items_default_to_page_one_and_refuse_bad_pages():
    assert ContentItem(type="pdf", content="a.pdf").page == 1
    row = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "pdf", "content": "a.pdf", "page": 3}, {"type": "text", "text": "?"}],
            },
            {"role": "assistant", "content": "ok"},
        ]
    }
    assert to_example(row, "conversation").images() == [ContentItem(type="pdf", content="a.pdf", page=3)]
    for page, reason in [
        (0, "'page' must be a page number >= 1 (1-based, like pdftoppm), got 0 in messages[0].content[0]"),
        (True, "'page' must be a page number >= 1"),
        ("2", "'page' must be a page number >= 1"),
    ]:
        row["messages"][0]["content"][0]["page"] = page
        with pytest.raises(RowError) as info:
            to_example(row, "conversation")
        assert info.value.reason.startswith(reason)
    row["messages"][0]["content"][0] = {"type": "image_path", "content": "a.png", "page": 2}
    with pytest.raises(RowError, match="'page' applies to pdf items only, not to a image_path item"):
        to_example(row, "conversation")


def test_vl_messages_for_a_processor_template_and_text_sft_refusal():
    convo = to_example(mllm_row("<image>Read <image>", "AB", images=["1.png", "2.png"]), "mllm")
    messages, images = convo.to_vl_messages()
    assert messages == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read "}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "AB"}]},
    ]
    assert images == [image("1.png"), image("2.png")]
    with pytest.raises(DataError, match=r"row has image content \(image_path in messages\[0\]\).*use method: vl_sft"):
        convo.to_hf_messages()


def test_llama_factory_mllm_demo_loads_with_no_rejected_rows_and_every_image_opens():
    if not SHARED_DEMO.exists():
        pytest.skip(f"{SHARED_DEMO} is absent: the shared data sets live beside the repository, not in it")
    raw = json.loads(SHARED_DEMO.read_text())
    loaded = load_examples([{"path": str(SHARED_DEMO)}], bad_rows="skip", check_images=check_images)
    assert loaded.report.count == 0 and len(loaded.examples) == len(raw)
    for example, row in zip(loaded.examples, raw):
        assert [item.content for item in example.images()] == [str(SHARED_DEMO.parent / path) for path in row["images"]]
        assert example.has_assistant()
        for item in example.images():
            picture = load_image(item)
            assert picture.mode == "RGB" and min(picture.size) > 0
