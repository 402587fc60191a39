"""``data.pdf_pages`` changes only the rows of olmOCR's sources: given without one, it is refused in one line (by the
reader ``honing.interop`` registers for olmOCR's formats, which VL-SFT's rows ask when they are made)."""

import pytest

from honing import extensions
from honing.config import ConfigError, validate
from honing.data.vision.source_formats import reader_for, registered_readers
from honing.interop.olmocr_rows import OLMOCR_FORMATS, OLMOCR_SOURCES

check_olmocr_sources = OLMOCR_SOURCES.check


def data_section(fmt: str, **data):
    raw = {
        "method": "vl_sft",
        "data": {"train": {"sources": [{"path": "pages", "format": fmt}]}, **data},
        "model": {"config": {"model_type": "qwen2_vl"}},
    }
    return validate(raw).data


def test_olmocr_options_without_an_olmocr_source_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^data\.pdf_pages: read by sources of format olmocr_pages / olmocr_batch"):
        check_olmocr_sources(data_section("conversation", pdf_pages={"prompt": "plain"}))
    check_olmocr_sources(data_section("olmocr_pages", pdf_pages={"prompt": "plain"}))  # read by its source
    check_olmocr_sources(data_section("conversation"))  # not given: nothing to refuse


def test_the_olmocr_reader_is_registered_for_both_formats_and_only_them():
    assert {name for name, path in extensions.SOURCE_FORMAT_READERS.items() if "olmocr" in path} == set(OLMOCR_FORMATS)
    assert all(reader_for(name) is OLMOCR_SOURCES for name in OLMOCR_FORMATS)
    assert reader_for("conversation") is None and OLMOCR_SOURCES in registered_readers()
