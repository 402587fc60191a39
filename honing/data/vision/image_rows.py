"""What the image pair (``vl_dpo``) and image prompt (``vl_grpo``) row kinds add alike to their text kind: the
model's processor in the cache key beside how PDF pages render, and opening an image item at that PDF size."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from honing.cache import content_hash
from honing.data.vision.images import load_image

if TYPE_CHECKING:
    from PIL.Image import Image
    from transformers import ProcessorMixin

    from honing.config.data_schema import DataSection
    from honing.data.formats import ContentItem


class ImageRowsMixin:
    """Placed before the text kind (``class VisionPromptRows(ImageRowsMixin, PromptRows)``), whose ``__init__`` sets
    ``data`` and whose ``settings`` this extends; the subclass sets ``processor``."""

    processor: ProcessorMixin
    data: DataSection

    def settings(self) -> dict[str, Any]:
        """The text settings, the processor (image sizes, patches, pixel bounds) and how PDF pages render (both
        change a row's image tokens)."""
        return {
            **super().settings(),  # type: ignore[misc]
            "processor": content_hash([self.processor.to_json_string()]),
            "pdf_longest_side": self.data.pdf_longest_side,
        }

    def load_image(self, item: ContentItem) -> Image:
        """One image item as an RGB image; PDF pages at ``data.pdf_longest_side`` when set."""
        return load_image(item, pdf_longest_side=self.data.pdf_longest_side)
