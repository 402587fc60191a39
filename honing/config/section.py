"""The base of every config section, in a module of its own so that section files beside ``schema.py`` share it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, a loaded config is read-only (a changed setting is a
    new config: ``config.model_copy(update=...)``), and the string under each field is its description (in the
    JSON schema, ``honing config keys`` and the docs' key reference)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
