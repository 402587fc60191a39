"""SFT's section (``method: sft``): what it adds to the next-token loss."""

from __future__ import annotations

from pydantic import Field

from honing.config.section import Section


class SFTSection(Section):
    """SFT (``method: sft``): what it adds to the next-token loss. Defaults are TRL's SFTConfig's."""

    neftune_noise_alpha: float | None = Field(default=None, gt=0)
    """NEFTune: uniform noise of magnitude alpha / sqrt(L · d) on the input embeddings of the training forwards
    (never evaluation or generation), L the length of each row's own sequence (a packed row's document), d the
    hidden size (TRL's and transformers' key; the paper uses 5 to 15); None: no noise."""
