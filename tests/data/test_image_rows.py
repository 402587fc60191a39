"""The image pair and image prompt row kinds' shared part: their cache key holds the processor and the PDF size."""

from types import SimpleNamespace
from typing import Any

from PIL import Image

from honing.data.formats import ContentItem
from honing.data.preference.vision_pairs import VisionPreferenceRows
from honing.data.prompts.vision_prompts import VisionPromptRows
from honing.data.vision.image_rows import ImageRowsMixin


class TextRows:
    """A stand-in text kind: its own settings, which the image part must keep."""

    def settings(self) -> dict[str, Any]:
        return {"tokenizer": "t"}


class Rows(ImageRowsMixin, TextRows):
    def __init__(self, processor_json: str, pdf_longest_side: int | None):
        self.processor = SimpleNamespace(to_json_string=lambda: processor_json)
        self.data = SimpleNamespace(pdf_longest_side=pdf_longest_side)


def test_settings_keep_the_text_settings_and_change_with_the_processor_and_the_pdf_size():
    base = Rows("{}", None).settings()
    assert base["tokenizer"] == "t" and base["pdf_longest_side"] is None
    assert Rows('{"size": 2}', None).settings()["processor"] != base["processor"]
    assert Rows("{}", 1024).settings() != base  # a prompt's PDF page renders to other image tokens


def test_both_image_row_kinds_take_the_shared_part():
    assert issubclass(VisionPromptRows, ImageRowsMixin) and issubclass(VisionPreferenceRows, ImageRowsMixin)
    assert VisionPromptRows.settings is VisionPreferenceRows.settings is ImageRowsMixin.settings


def test_load_image_opens_an_image_file_as_rgb(tmp_path):
    path = tmp_path / "a.png"
    Image.new("L", (3, 2), color=7).save(path)
    image = Rows("{}", None).load_image(ContentItem(type="image_path", content=str(path)))
    assert image.mode == "RGB" and image.size == (3, 2) and image.getpixel((0, 0)) == (7, 7, 7)
