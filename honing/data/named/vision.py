"""Named image data sets: Geometry3K's diagrams with their problems, as image conversations (VL-SFT; VL-GRPO reads
the answer as ``answer``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.data.example_types import RowError
from honing.data.named.entry import NamedDataset, column

# Oumi's Geometry3kDataset appends this to the problem (EasyR1's format prompt)
GEOMETRY3K_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The "
    "reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}."
)


def geometry3k_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``images`` (one diagram) / ``problem`` (``<image>`` then the text) / ``answer`` → the diagram, the problem
    with Oumi's instruction, and the answer (an mllm row: the placeholder takes the image)."""
    images = column(row, "images", list)
    if len(images) != 1:
        raise RowError(f"column 'images' holds {len(images)} images; a Geometry3K problem has one diagram")
    problem = column(row, "problem").strip().removeprefix("<image>")
    return {
        "messages": [
            {"role": "user", "content": f"<image>{problem} {GEOMETRY3K_INSTRUCTION}"},
            {"role": "assistant", "content": column(row, "answer").strip()},
        ],
        "images": images,
    }


VISION = (
    NamedDataset(
        name="geometry3k",
        aliases=("hiyouga/geometry3k",),
        columns=(("images", "problem", "answer"),),
        gives="image conversations",
        build=geometry3k_row,
        reward="math_verify",
        description="geometry diagrams and problems; the answer in \\boxed{}",
    ),
)
