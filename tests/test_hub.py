"""Telling a local folder from a Hugging Face hub id before transformers is asked (no network: local cases)."""

from __future__ import annotations

import pytest

from honing.errors import ConfigError
from honing.hub import check_name_or_path, is_hub_id


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpt2", True),
        ("Qwen/Qwen2-0.5B", True),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", True),
        ("runs/quickstart/hf", False),
        ("./model", False),
        ("/abs/model", False),
        ("~/model", False),
        ("a\\b", False),
        ("runs/hf", False),  # runs/ exists in the test's folder: a path into it
    ],
)
def test_is_hub_id(tmp_path, monkeypatch, name, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert is_hub_id(name) is expected


def test_hub_ids_and_existing_folders_pass_the_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "quickstart" / "hf").mkdir(parents=True)
    for name in ("gpt2", "Qwen/Qwen2-0.5B", "runs/quickstart/hf", str(tmp_path / "runs")):
        check_name_or_path(name, "model.name_or_path")


def test_a_missing_tokenizer_folder_names_both_keys_that_give_it(tmp_path, monkeypatch):
    from honing.data.tokenizer import load_pretrained_tokenizer

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError,
        match=r"^model.name_or_path / tokenizer.path: runs/quickstart/hf does not exist: it is the output of "
        r"quickstart; run `(\.venv/bin/)?honing train quickstart` first$",
    ):
        load_pretrained_tokenizer("runs/quickstart/hf")
