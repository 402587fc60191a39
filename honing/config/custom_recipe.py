"""A run config may name its own recipe class (VeOmni's way to customise a trainer: subclass it): ``recipe:
mypkg.recipes:MyRecipe`` or ``method: mypkg.recipes:MyRecipe``. The class is imported to learn which method's
recipe it extends, since that method decides which keys the config may use.

Such a class may declare config sections of its own (VeOmni's "extending the arguments"): ``config_sections = {"train":
MyTrainSection}``, each a pydantic model or a dataclass. The config then accepts those top-level sections, validated
like honing's own (unknown keys refused with the closest match, wrong types named), and ``config.train`` holds them;
every other unknown key is still refused.

The import is of the user's module, found by name at load time (on ``sys.path``, else in the current folder); this
package still imports nothing of honing.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import typing
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from honing.config.methods import METHODS
from honing.config.section import Section

RECIPES_PACKAGE = "honing.recipes."

_Raw = TypeVar("_Raw")


def import_recipe(path: str, key: str) -> type:
    """The class ``package.module:ClassName`` names; ValueError (naming ``key``) when it cannot be imported."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{key}: expected 'package.module:ClassName', got {path!r}")
    try:
        found = getattr(import_from_path_or_here(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{key}: cannot import {path!r}: {error}") from None
    if not isinstance(found, type):
        raise ValueError(f"{key}: {path!r} is not a class")
    return found


def import_from_path_or_here(module: str) -> ModuleType:
    """``module`` from ``sys.path``, else from the current folder (where ``python -m honing`` would find it; the
    ``honing`` command's own path does not hold it), which then stays on ``sys.path`` for the run."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        here = os.getcwd()
        if error.name != module.partition(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module)


def method_of(modules: Iterable[str]) -> str | None:
    """The method whose built-in recipe module is among ``modules`` (those of a class and its bases, nearest
    first): the method whose recipe the class is or extends (None: none of them)."""
    for module in modules:
        if module.startswith(RECIPES_PACKAGE) and module.removeprefix(RECIPES_PACKAGE) in METHODS:
            return module.removeprefix(RECIPES_PACKAGE)
    return None


def resolve_recipe_keys(raw: _Raw) -> _Raw:
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
    found = method_of(klass.__module__ for klass in import_recipe(recipe, key).__mro__)
    if found is None:
        raise ValueError(
            f"{key}: {recipe!r} does not extend a method's recipe; subclass one of "
            + ", ".join(f"{RECIPES_PACKAGE}{name}" for name in METHODS)
        )
    return {**raw, "method": found, "recipe": recipe}  # type: ignore[return-value]  # a dict as it came


def declared_sections(raw: object) -> dict[str, type]:
    """The config sections the recipe class ``raw`` names declares (``config_sections``; none when it names no
    recipe); ValueError when the class cannot be imported."""
    if not isinstance(raw, dict):
        return {}
    path = resolve_recipe_keys(raw).get("recipe")
    recipe = import_recipe(path, "recipe") if isinstance(path, str) else None
    return dict(getattr(recipe, "config_sections", None) or {})


_EXTENDED: dict[tuple[type, tuple[tuple[str, type], ...]], type[BaseModel]] = {}


def with_sections(schema: type[BaseModel], sections: Mapping[str, type]) -> type[BaseModel]:
    """``schema`` with a field per declared section (its default: the section's defaults, when it has them); a
    name honing already uses is a ValueError."""
    if not sections:
        return schema
    key = (schema, tuple(sorted(sections.items(), key=lambda item: item[0])))
    if key not in _EXTENDED:
        fields: dict[str, Any] = {}
        for name, kind in sections.items():
            if name in schema.model_fields:
                raise ValueError(f"{name}: a recipe's own config section cannot take the name of honing's {name!r}")
            model = section_model(kind, name)
            fields[name] = (model, Field(default_factory=model) if has_defaults(model) else ...)
        _EXTENDED[key] = create_model(schema.__name__, __base__=schema, __module__=schema.__module__, **fields)
    return _EXTENDED[key]


_MODELS: dict[type, type[BaseModel]] = {}


def section_model(kind: object, key: str) -> type[BaseModel]:
    """The pydantic model that validates section ``key`` of type ``kind``: a pydantic model refusing unknown keys
    (made so when it does not), or a dataclass read field by field (``metadata={"help": ...}`` its description,
    nested dataclasses as sections of their own)."""
    if kind not in _MODELS:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            strict = kind.model_config.get("extra") == "forbid"
            model = kind if strict else type(kind.__name__, (kind,), {"model_config": ConfigDict(extra="forbid")})
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            model = dataclass_model(kind, key)
        else:
            raise ValueError(f"{key}: a recipe's config section is a pydantic model or a dataclass, got {kind!r}")
        _MODELS[kind] = model
    return _MODELS[kind]


def dataclass_model(kind: type, key: str) -> type[BaseModel]:
    """A ``Section`` with the dataclass's fields, types and defaults."""
    try:
        hints = typing.get_type_hints(kind)
    except NameError as error:  # a string annotation naming what the dataclass's module does not define
        raise ValueError(f"{key}: cannot read the annotations of {kind.__name__}: {error}") from None
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(kind):
        if not field.init:
            continue
        annotation = hints.get(field.name, field.type)
        nested = isinstance(annotation, type) and dataclasses.is_dataclass(annotation)
        if nested:
            annotation = section_model(annotation, f"{key}.{field.name}")
        options: dict[str, Any] = {"description": field.metadata.get("help")}
        if field.default is not dataclasses.MISSING:
            options["default"] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            factory = field.default_factory
            is_section = isinstance(factory, type) and dataclasses.is_dataclass(factory)
            options["default_factory"] = section_model(factory, f"{key}.{field.name}") if is_section else factory
        fields[field.name] = (annotation, Field(**options))
    return create_model(kind.__name__, __base__=Section, __module__=kind.__module__, __doc__=kind.__doc__, **fields)


def has_defaults(model: type[BaseModel]) -> bool:
    """Whether every field of ``model`` has a default (the section may then be left out)."""
    return all(not field.is_required() for field in model.model_fields.values())
