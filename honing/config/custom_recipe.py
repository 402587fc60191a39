"""A run config may name its own recipe class (VeOmni's way to customise a trainer: subclass it): ``recipe:
mypkg.recipes:MyRecipe`` or ``method: mypkg.recipes:MyRecipe``. The class is imported to learn which method's
recipe it extends, since that method decides which keys the config may use.

The import is of the user's module, found by name at load time; this package still imports nothing of honing.
"""

from __future__ import annotations

import importlib
from typing import Any

from honing.config.methods import METHODS

RECIPES_PACKAGE = "honing.recipes."


def import_recipe(path: str, key: str) -> type:
    """The class ``package.module:ClassName`` names; ValueError (naming ``key``) when it cannot be imported."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{key}: expected 'package.module:ClassName', got {path!r}")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{key}: cannot import {path!r}: {error}") from None
    if not isinstance(found, type):
        raise ValueError(f"{key}: {path!r} is not a class")
    return found


def method_of(recipe: type) -> str | None:
    """The method whose built-in recipe ``recipe`` is or extends (None: none of them)."""
    for klass in recipe.__mro__:
        module = klass.__module__
        if module.startswith(RECIPES_PACKAGE) and module.removeprefix(RECIPES_PACKAGE) in METHODS:
            return module.removeprefix(RECIPES_PACKAGE)
    return None


def resolve_recipe_keys(raw: Any) -> Any:
    """``method: pkg:Class`` becomes ``recipe: pkg:Class`` plus the method it extends; ``recipe`` without a
    ``method`` gets its method the same way. Other configs pass through unchanged."""
    if not isinstance(raw, dict):
        return raw
    method, recipe = raw.get("method"), raw.get("recipe")
    key = "method"
    if isinstance(method, str) and ":" in method:
        if recipe is not None and recipe != method:
            raise ValueError(f"recipe: {recipe!r} and method: {method!r} name two recipes; give one")
        recipe = method
    elif isinstance(recipe, str) and method is None:
        key = "recipe"
    else:
        return raw
    found = method_of(import_recipe(recipe, key))
    if found is None:
        raise ValueError(
            f"{key}: {recipe!r} does not extend a method's recipe; subclass one of "
            + ", ".join(f"{RECIPES_PACKAGE}{name}" for name in METHODS)
        )
    return {**raw, "method": found, "recipe": recipe}
