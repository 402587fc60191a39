"""A split's ``mixture``: its sources sampled by proportion (datasets' ``interleave_datasets``, OLMo-core's source
mixtures) instead of concatenated."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.section import Section


class MixtureSection(Section):
    """How a split's sources are mixed: each draw picks a source by its ``proportion`` (seeded) and takes that
    source's next row; when the mixture stops is ``stop`` (or ``rows``)."""

    stop: Literal["first_exhausted", "all_exhausted", "all_exhausted_without_replacement"] = "first_exhausted"
    """When drawing stops, as ``datasets.interleave_datasets``' ``stopping_strategy``: ``first_exhausted`` once
    any source has given all its rows (the others give fewer), ``all_exhausted`` once every source has (a source
    that runs out starts again from its first row, so smaller ones repeat), ``all_exhausted_without_replacement``
    once every source has, each row once (a source that runs out is skipped)."""
    rows: int | None = Field(default=None, ge=1)
    """Draw exactly this many rows (a source that runs out starts again), instead of stopping at ``stop``; None:
    ``stop`` decides."""
    seed: int | None = Field(default=None, ge=0)
    """The draw's seed (another system's mixture seed, to draw its rows); None: ``trainer.seed``."""
    max_repetition: float | None = Field(default=None, gt=0)
    """The most times one source's rows may be drawn over (drawn rows / its rows): a mixture beyond it is an
    error naming the source; None: no bound (each source's repetition is reported either way)."""

    @model_validator(mode="after")
    def _rows_or_stop(self) -> MixtureSection:
        if self.rows is not None and "stop" in self.model_fields_set:
            raise ValueError(
                f"give a mixture's rows ({self.rows}) or its stop ({self.stop}), not both: rows draws exactly that "
                "many, sources starting again when they run out"
            )
        return self
