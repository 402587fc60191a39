"""VeOmni's recipe steps as its document writes them, adapted once when a recipe class is defined: honing's
``freeze_module(model)`` is VeOmni's ``freeze_module(self)``, which reads the model as ``self.model``."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def adapt_recipe_steps(cls: type) -> None:
    """Give ``cls``'s VeOmni-form steps honing's arguments, in place (a class in honing's form is left as it is)."""
    freeze = vars(cls).get("freeze_module")
    if freeze is None or list(inspect.signature(freeze).parameters) != ["self"]:
        return

    @functools.wraps(freeze)
    def freeze_module(self: Any, model: Any) -> None:
        self.model = model  # what VeOmni's step freezes
        freeze(self)

    cls.freeze_module = freeze_module
