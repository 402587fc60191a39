"""ORPO's section (``method: orpo``): TRL's ORPOTrainer loss, no reference model."""

from __future__ import annotations

from pydantic import Field

from honing.config.section import Section


class ORPOSection(Section):
    """ORPO (``method: orpo``): preference pairs trained with TRL's ORPOTrainer loss, no reference model: the chosen
    sequence's negative log-likelihood (prompt and reply, as TRL computes it) plus ``beta`` × −log σ of the log odds
    ratio of the chosen over the rejected reply (token-mean log-probs). Defaults are TRL's ORPOConfig's."""

    beta: float = Field(default=0.1, gt=0)
    """The odds-ratio term's weight against the NLL (the paper's lambda); also scales the logged rewards."""
    packed_pairs: bool = True
    """A micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not under
    ``parallel.compile``); false: one right-padded row per pair under a dense 4D mask."""
