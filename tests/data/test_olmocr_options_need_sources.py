"""``data.olmocr`` changes only the rows of olmOCR's sources: given without one, it is refused in one line."""

import pytest

from honing.config import ConfigError, validate
from honing.data.vision.vision_rows import check_olmocr_sources


def data_section(fmt: str, **data):
    raw = {
        "method": "vl_sft",
        "data": {"train": {"sources": [{"path": "pages", "format": fmt}]}, **data},
        "model": {"config": {"model_type": "qwen2_vl"}},
    }
    return validate(raw).data


def test_olmocr_options_without_an_olmocr_source_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^data\.olmocr: read by sources of format olmocr_pages / olmocr_batch"):
        check_olmocr_sources(data_section("conversation", olmocr={"prompt": "plain"}))
    check_olmocr_sources(data_section("olmocr_pages", olmocr={"prompt": "plain"}))  # read by its source
    check_olmocr_sources(data_section("conversation"))  # not given: nothing to refuse
