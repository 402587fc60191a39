"""olmOCR's data read as VL-SFT conversations (``honing.interop.olmocr_rows``, registered for the core's vision
source formats): both layouts, each pipeline
option, the anchor text from the PDF's text layer, and bad rows that name their file (and line)."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from honing.config.schema import DataSection
from honing.data.vision.source_formats import read_vision_sources
from honing.errors import DataError
from honing.interop.olmocr_anchor import PageElement, anchor_text, linearize
from honing.interop.olmocr_pages import parse_page
from honing.interop.olmocr_rows import flip_reply_tokens
from honing.interop.olmocr_text import broken_rule, latex_bold_italic, latex_brackets, transform_tables
from tests.interop.configs.olmocr_data import FRONT_MATTER, batch_folder, batch_response, pages_folder, text_pdf


def read(path, fmt, **data):
    """The conversations of one source and the bad-row report."""
    section = DataSection.model_validate({"train": {"sources": [{"path": str(path), "format": fmt}]}, **data})
    fields = [section.train.sources[0].model_dump(exclude={"name"})]
    found, report = read_vision_sources(fields, section)
    return found[0], report


def turns(conversation):
    user, reply = conversation.messages
    return [(item.type, item.content) for item in user.items()], reply.text()


def test_a_pages_folder_gives_the_page_then_the_instruction_and_the_front_matter_reply(tmp_path):
    found, _ = read(pages_folder(tmp_path, pages=4), "olmocr_pages")
    assert [origin.rsplit("/", 1)[-1] for _, origin in found] == ["p00.md", "p02.md", "p01.md", "p03.md"]
    user, reply = turns(found[0][0])
    assert user[0] == ("pdf", str(tmp_path / "p00.pdf")) and user[1][0] == "text"
    assert "front matter" in user[1][1] and "text layer" not in user[1][1]  # no anchor text unless asked for
    assert reply == FRONT_MATTER.replace("true", "True").replace("false", "False") + "alpha 0"


def test_anchor_text_comes_from_the_text_layer_and_an_exact_prompt_replaces_honings_words(tmp_path):
    folder = pages_folder(tmp_path, pages=1)
    options = {"anchor_text_len": 500, "prompt": "plain", "prompt_first": True}
    user, _ = turns(read(folder, "olmocr_pages", pdf_pages=options)[0][0][0])
    assert user[1][0] == "pdf" and "Page size: 200.0x100.0 points\n[" in user[0][1] and "] alpha 0" in user[0][1]
    exact = {"anchor_text_len": 500, "prompt_text": "Read this.\nRAW_TEXT_START\n{anchor_text}RAW_TEXT_END"}
    user, _ = turns(read(folder, "olmocr_pages", pdf_pages=exact)[0][0][0])
    assert user[1][1].startswith("Read this.\nRAW_TEXT_START\nPage size: ") and user[1][1].endswith("RAW_TEXT_END")


def test_anchor_text_keeps_the_first_and_last_elements_within_its_length(tmp_path):
    pdf = text_pdf(tmp_path / "a.pdf", ["first [line]", "middle one", "middle two", "last line"], size=(200, 120))
    whole = anchor_text(pdf, 1, 1000)
    assert whole.splitlines()[1:] == [
        "[10,98] first \\[line\\]",
        "[11,86] middle one",
        "[11,72] middle two",
        "[11,58] last line",
    ]
    cut = anchor_text(pdf, 1, len("[10,98] first \\[line\\]\n[11,58] last line\n[11,86] middle one\n"))
    assert cut.splitlines()[1:] == ["[10,98] first \\[line\\]", "[11,86] middle one", "[11,58] last line"]
    assert anchor_text(pdf, 1, -1).splitlines()[1] == "[image 0,0 to 200,120]"  # the page as one image
    assert linearize(10, 10, [PageElement(1, 1, "x" * 50)], 5) == "Page size: 10.0x10.0 points\n"


def test_text_options_rewrite_or_leave_out_pages(tmp_path):
    table = '<table><tr><td>a</td><td colspan="2">b</td></tr><tr><td>1</td><td>2</td><td>3</td></tr></table>'
    assert transform_tables(table, "annotate_dims").startswith('<table data-totalrows="2" data-totalcols="3">')
    assert "<!-- row 2 of the table: column 1: 1, column 2: 2, column 3: 3 -->" in transform_tables(
        table, "firstrowpreview"
    )
    assert latex_bold_italic(r"\textbf{big {x}} and \(\textit{y}\)") == r"**big {x}** and \(\textit{y}\)"
    assert latex_brackets("$$a$$ and $b$") == r"\[a\] and \(b\)"
    assert broken_rule("| a | b |\n|---|---|") == "it holds a markdown table"
    assert broken_rule("x ∈ A") == "it holds math symbols outside a table"
    assert broken_rule("<table><tr><td>x</td></th></tr></table>") == "it holds a malformed HTML table"
    assert broken_rule(r"see \cite{x} but \(\frac{1}{2}\)") == r"it holds the LaTeX \cite outside math"
    assert broken_rule(r"plain \(\frac{1}{2}\) text") is None
    folder = pages_folder(tmp_path, pages=3)
    (folder / "p00.md").write_text(FRONT_MATTER.replace("rotation_correction: 0", "rotation_correction: 90") + "x")
    (folder / "p02.md").write_text(FRONT_MATTER + "x ∈ A")
    found, _ = read(folder, "olmocr_pages", pdf_pages={"skip_rotated": True, "text_rules": True})
    assert [origin.rsplit("/", 1)[-1] for _, origin in found] == ["p01.md"]


def test_rotation_turns_the_rendered_page_and_the_reply_says_the_correction(tmp_path):
    found, _ = read(
        pages_folder(tmp_path, pages=1), "olmocr_pages", pdf_longest_side=64, pdf_pages={"rotation_probability": 1.0}
    )
    user, reply = turns(found[0][0])
    image = Image.open(io.BytesIO(base64.b64decode(user[0][1])))
    assert user[0][0] == "image_base64" and image.size == (32, 64)  # the 64 x 32 page turned on its side
    correction = int(reply.split("rotation_correction: ")[1].split("\n")[0])
    assert "is_rotation_valid: False" in reply and correction in (90, 270)


def test_a_bad_page_names_its_file_and_what_is_wrong(tmp_path):
    folder = pages_folder(tmp_path, pages=3)
    (folder / "p00.md").write_text(FRONT_MATTER.replace("is_diagram: false\n", "") + "x")
    with pytest.raises(DataError, match=r"p00\.md: the front matter lacks is_diagram"):
        read(folder, "olmocr_pages")
    (folder / "part" / "p01.pdf").unlink()
    found, report = read(folder, "olmocr_pages", bad_rows="skip")
    assert (
        len(found) == 1 and report.count == 2 and "part/p01.md: no PDF beside it (expected p01.pdf)" in report.summary()
    )
    with pytest.raises(DataError, match=r"rotation_correction is 45"):
        parse_page(FRONT_MATTER.replace("rotation_correction: 0", "rotation_correction: 45"))


def test_batch_responses_name_their_pages_and_unfinished_ones_are_left_out(tmp_path):
    folder = batch_folder(tmp_path, pages=3, unfinished=1)
    found, _ = read(folder / "done", "olmocr_batch", pdf_pages={"anchor_text_len": 100, "prompt": "plain"})
    assert len(found) == 3 and found[0][1] == f"{folder / 'done' / 'responses.json'}:1"
    user, reply = turns(found[0][0])
    assert user[0] == ("pdf", str(folder / "pdfs" / "d00.pdf")) and "] alpha 0" in user[1][1]
    assert json.loads(reply)["natural_text"] == "alpha 0"


def test_a_bad_response_line_names_its_file_and_line(tmp_path):
    folder = batch_folder(tmp_path, pages=2)
    responses = folder / "done" / "responses.json"
    lines = responses.read_text().splitlines()
    lines.insert(1, json.dumps(batch_response("no-page-number", "x")))
    lines.append("{not json")
    responses.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=rf"{responses}:2: custom_id 'no-page-number' does not end in '-PAGE'"):
        read(folder / "done", "olmocr_batch")
    found, report = read(folder / "done", "olmocr_batch", bad_rows="skip")
    assert len(found) == 2 and report.count == 2 and f"{responses}:4: invalid JSON" in report.summary()


def test_requests_give_the_prompt_and_image_as_sent(tmp_path):
    folder = batch_folder(tmp_path, pages=1)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "white").save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    custom_id = json.loads((folder / "done" / "responses.json").read_text())["custom_id"]
    content = [{"type": "text", "text": "As sent."}, {"type": "image_url", "image_url": {"url": url}}]
    request = {"custom_id": custom_id, "body": {"messages": [{"role": "user", "content": content}]}}
    (folder / "requests.jsonl").write_text(json.dumps(request) + "\n")
    found, _ = read(folder / "done", "olmocr_batch", pdf_pages={"queries": [str(folder / "requests.jsonl")]})
    assert turns(found[0][0])[0] == [("image_url", url), ("text", "As sent.")]


class Tokens:
    """A tokenizer's two members the token flipper reads."""

    all_special_ids = [0, 1]

    def __len__(self):
        return 10


def test_token_flips_replace_reply_tokens_and_leave_them_out_of_the_loss():
    row = {"text": "row", "input_ids": list(range(2, 10)) * 50, "labels": [-100] * 200 + list(range(2, 10)) * 25}
    flipped = flip_reply_tokens([dict(row), DataError("bad")], 0.5, Tokens())[0]
    changed = [i for i, (a, b) in enumerate(zip(row["labels"], flipped["labels"])) if a != b]
    assert changed and min(changed) >= 200 and all(flipped["labels"][i] == -100 for i in changed)
    assert all(flipped["input_ids"][i] >= 2 for i in changed) and flipped["input_ids"][:200] == row["input_ids"][:200]
    assert flip_reply_tokens([dict(row)], 0.5, Tokens())[0] == flipped  # drawn from the row: the same every time


def test_token_flips_never_draw_a_tokenizers_added_tokens(tmp_path):
    from transformers import AutoProcessor

    from honing.models.tiny_vl import build_tiny_processor

    tokenizer = AutoProcessor.from_pretrained(build_tiny_processor("qwen2_vl", str(tmp_path))).tokenizer
    # the tiny tokenizer, as some real ones, lists <|image_pad|> among its added tokens but not its special ones
    assert tokenizer.convert_tokens_to_ids("<|image_pad|>") not in tokenizer.all_special_ids
    row = {"text": "row", "input_ids": [100] * 3000, "labels": [100] * 3000}
    flipped = flip_reply_tokens([row], 0.9, tokenizer)[0]["input_ids"]
    assert len(set(flipped)) > 100 and not set(flipped) & set(tokenizer.added_tokens_decoder)


def test_rotated_pages_train_on_their_turned_image(tmp_path, monkeypatch):
    from transformers import AutoProcessor

    from honing.config import validate
    from honing.data.formats import ContentItem
    from honing.data.vision.batches import VLCollator
    from honing.data.vision.images import load_image
    from honing.models.tiny_vl import build_tiny_processor
    from honing.recipes.vl_sft import VLSFTRecipe

    seen = []  # each micro-batch as the model gets it
    split = VLCollator.split

    def recording(collator, batch, rows):
        micro_batches = split(collator, batch, rows)
        seen.extend(micro_batches)
        return micro_batches

    monkeypatch.setattr(VLCollator, "split", recording)
    folder = pages_folder(tmp_path / "pages", pages=8)
    # with flips: drawn from the rows' texts, a turned page's reply once drew <|image_pad|> and broke its batch
    olmocr = {"rotation_probability": 0.5, "token_flip_rate": 0.1}
    data = {
        "train": {"sources": [{"path": str(folder), "format": "olmocr_pages"}]},
        "pdf_pages": olmocr,
        "seq_len": 512,
    }
    config = validate(
        {
            "method": "vl_sft",
            "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "1steps", "num_threads": 1},
            "data": {**data, "global_batch_size": 8, "cache_dir": str(tmp_path / "cache")},
            "model": {"config": {"model_type": "qwen2_vl"}},
            "callbacks": {"evaluator": {"enabled": False}, "sample": {"enabled": False}},
        }
    )
    VLSFTRecipe(config).run()

    processor = AutoProcessor.from_pretrained(build_tiny_processor("qwen2_vl", str(tmp_path / "processor")))

    def pixels(item):
        encoding = processor.image_processor(images=[load_image(item)], return_tensors="pt")
        return encoding["pixel_values"], tuple(encoding["image_grid_thw"][0].tolist())

    found, _ = read(folder, "olmocr_pages", pdf_pages=olmocr)
    pages = [pixels(conversation.images()[0]) for conversation, _ in found]
    renders = [pixels(ContentItem(type="pdf", content=origin[: -len(".md")] + ".pdf", page=1)) for _, origin in found]
    turned = [index for index, (page, render) in enumerate(zip(pages, renders)) if not page[0].equal(render[0])]
    assert 0 < len(turned) < len(pages) and {grid for _, grid in pages} == {(1, 4, 10), (1, 10, 4)}
    shown = []  # which page each image the model saw is, pixel for pixel
    for batch in seen:
        start = 0
        for grid in batch["image_grid_thw"].tolist():
            patches = batch["pixel_values"][start : start + grid[0] * grid[1] * grid[2]]
            shown += [index for index, (page, _) in enumerate(pages) if patches.equal(page)]
            start += len(patches)
    assert sorted(shown) == list(range(len(pages)))  # every page once, turned ones as turned


def test_a_source_with_its_own_pipeline_options_reads_by_them_and_the_others_by_the_runs(tmp_path):
    # olmOCR gives each data set its own pipeline: an eval set without the training set's filters reads every page
    folder = pages_folder(tmp_path, pages=3)
    (folder / "p00.md").write_text(FRONT_MATTER.replace("rotation_correction: 0", "rotation_correction: 90") + "x")
    sources = [
        {"path": str(folder), "format": "olmocr_pages"},
        {"path": str(folder), "format": "olmocr_pages", "pdf_pages": {"prompt": "plain"}},
    ]
    section = DataSection.model_validate({"train": {"sources": sources}, "pdf_pages": {"skip_rotated": True}})
    fields = [source.model_dump(exclude={"name"}, exclude_none=True) for source in section.train.sources]
    found, _ = read_vision_sources(fields, section)
    assert [len(rows) for rows in found] == [2, 3]  # the run's filter leaves out the rotated page; the own one does not
    run_prompt, own_prompt = turns(found[0][0][0])[0][1][1], turns(found[1][0][0])[0][1][1]
    assert "front matter" in run_prompt and "front matter" not in own_prompt


def test_own_pipeline_options_are_for_olmocr_sources_and_the_flip_rate_stays_the_runs():
    from honing.errors import ConfigError
    from honing.interop.olmocr_rows import OLMOCR_SOURCES

    other = DataSection.model_validate({"train": {"sources": [{"path": "a.jsonl", "pdf_pages": {"prompt": "plain"}}]}})
    with pytest.raises(ConfigError, match=r"^data\.train\.sources\[0\]\.pdf_pages: read by sources of format"):
        OLMOCR_SOURCES.check(other)  # what every VL run's reader checks before reading
    own = {"path": "pages", "format": "olmocr_pages", "pdf_pages": {"token_flip_rate": 0.1}}
    with pytest.raises(ConfigError, match="pdf_pages.token_flip_rate: a run-wide setting; give it in data.pdf_pages"):
        OLMOCR_SOURCES.check(DataSection.model_validate({"train": {"sources": [own]}}))
