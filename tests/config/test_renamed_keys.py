"""A key honing renamed is refused in one line naming its new name: ``data.olmocr`` (PDF-page transcription's
section, named after the data's origin first) is ``data.pdf_pages``, in a file, an override and on the CLI."""

from __future__ import annotations

import pytest
import yaml

from honing.cli import main
from honing.config import ConfigError, load_config
from honing.config.reference import config_sections
from honing.config.renamed_keys import RENAMED_KEYS

PAGES = {"train": {"sources": [{"path": "pages", "format": "olmocr_pages"}]}}


def write_config(tmp_path, data):
    path = tmp_path / "c.yaml"
    raw = {"method": "vl_sft", "data": data, "model": {"config": {"model_type": "qwen2_vl"}}}
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_the_former_section_name_is_refused_naming_the_new_one(tmp_path):
    path = write_config(tmp_path, {**PAGES, "olmocr": {"prompt": "plain"}})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert (
        str(error.value)
        == f"{path}: data.olmocr: renamed to data.pdf_pages (the same options); write data.pdf_pages instead"
    )
    with pytest.raises(ConfigError, match=r"data\.olmocr: renamed to data\.pdf_pages"):
        load_config(write_config(tmp_path, PAGES), ["data.olmocr.prompt=plain"])


def test_the_new_name_takes_the_same_options(tmp_path):
    config = load_config(write_config(tmp_path, {**PAGES, "pdf_pages": {"prompt": "plain", "anchor_text_len": 6000}}))
    assert (config.data.pdf_pages.prompt, config.data.pdf_pages.anchor_text_len) == ("plain", 6000)


def test_every_new_name_is_a_section_of_the_schema_and_no_old_one_is():
    paths = {section.path for section in config_sections()}
    assert all(new in paths and old not in paths for old, new in RENAMED_KEYS.items())


def test_the_cli_prints_the_refusal_on_one_line_and_exits_2(tmp_path, capsys):
    assert main(["plan", write_config(tmp_path, {**PAGES, "olmocr": {}})]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "data.olmocr: renamed to data.pdf_pages" in err
