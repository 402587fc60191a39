"""GRPO's prompt rows read through the one row loop (honing/data/row_reader.py): an ``auto`` source takes each row's
format from its own keys, ``max_samples`` counts rows, a bad row always fails naming its file:line (prompts have no
data.bad_rows), and image prompts read LLaMA-Factory's ``mllm`` sources as ``auto``."""

from __future__ import annotations

import json

import pytest

from honing.data.prompts.prompts import Prompt, load_prompts, read_prompt_sources
from honing.data.prompts.vision_prompts import read_vision_prompt_sources
from honing.errors import DataError


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_an_auto_source_reads_each_rows_own_format(tmp_path):
    rows = [
        {"prompt": "2+2?", "answer": "4"},
        {"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6"}]},
    ]
    found = read_prompt_sources([{"path": write(tmp_path / "p.jsonl", rows)}])[0]
    assert [prompt for prompt, _ in found] == [
        Prompt("2+2?", {"answer": "4"}),
        Prompt([{"role": "user", "content": "3+3?"}], {"answer": "6"}),
    ]
    assert [origin for _, origin in found] == [f"{tmp_path / 'p.jsonl'}:1", f"{tmp_path / 'p.jsonl'}:2"]


def test_max_samples_keeps_the_first_rows(tmp_path):
    path = write(tmp_path / "p.jsonl", [{"prompt": f"q{i}"} for i in range(5)])
    found = read_prompt_sources([{"path": path, "max_samples": 2}])[0]
    assert [prompt.prompt for prompt, _ in found] == ["q0", "q1"]


def test_a_bad_row_fails_naming_its_line_without_a_bad_rows_hint(tmp_path):
    path = write(tmp_path / "p.jsonl", [{"prompt": "ok"}, {"question": "no prompt key"}])
    with pytest.raises(DataError, match=r"p\.jsonl:2: cannot detect a prompt format from the keys 'question'") as error:
        read_prompt_sources([{"path": path}])
    assert "bad_rows" not in str(error.value)


def test_a_format_that_holds_no_prompts_is_refused(tmp_path):
    path = write(tmp_path / "p.jsonl", [{"prompt": "ok"}])
    expected = "format 'alpaca' holds no prompts; expected auto or one of: prompt, conversation"
    with pytest.raises(DataError, match=expected):
        read_prompt_sources([{"path": path, "format": "alpaca"}])


def test_an_empty_source_is_refused(tmp_path):
    path = write(tmp_path / "p.jsonl", [])
    with pytest.raises(DataError, match=r"data source 0 \('.*p\.jsonl'\) holds no prompts$"):
        read_prompt_sources([{"path": path}])


def test_image_prompts_read_an_mllm_source_as_auto_with_paths_beside_the_file(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "<image>What is it?"}], "images": ["cat.png"], "id": 7}]
    found = read_vision_prompt_sources([{"path": write(tmp_path / "v.jsonl", rows), "format": "mllm"}])[0]
    (conversation, columns), origin = found[0]
    assert columns == {"id": 7} and origin == f"{tmp_path / 'v.jsonl'}:1"
    image = conversation.messages[0].items()[0]
    assert image.type == "image_path" and image.content == str(tmp_path / "cat.png")


def test_load_prompts_repeats_each_source_by_its_weight(tmp_path):
    first = write(tmp_path / "a.jsonl", [{"prompt": "a0"}, {"prompt": "a1"}])
    second = write(tmp_path / "b.jsonl", [{"prompt": "b0"}])
    loaded = load_prompts([{"path": first, "weight": 2.0}, {"path": second}], seed=0)
    texts = [prompt.prompt for prompt, _ in loaded]
    assert sorted(texts[:4]) == ["a0", "a0", "a1", "a1"] and texts[4:] == ["b0"]  # sources stay in order
