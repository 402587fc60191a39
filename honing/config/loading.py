"""Turn a YAML file plus dotted overrides into a validated RunConfig, with errors a user can act on."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from honing.config.errors import ConfigError
from honing.config.schema import RunConfig


def load_config(path: str | None, overrides: Iterable[str] = (), *, schema: type[BaseModel] = RunConfig) -> Any:
    """Read ``path`` (YAML), apply ``key.path=value`` overrides, validate against ``schema``."""
    raw = read_yaml(path) if path else {}
    for override in overrides:
        apply_override(raw, override)
    return validate(raw, schema=schema, source=path or "<overrides>")


def read_yaml(path: str) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; a missing file or bad YAML is a ConfigError."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: config file not found")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(data).__name__}")
    return data


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a nested mapping; the value is parsed as YAML (so lists and numbers work)."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r}: expected key.path=value")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {error}") from None
    parts = key.strip().split(".")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            path = ".".join(parts[: depth + 1])
            raise ConfigError(f"override {override!r}: {path} is {child!r}, not a section")
        node = child
    node[parts[-1]] = value


def validate(raw: Mapping[str, Any], *, schema: type[BaseModel] = RunConfig, source: str = "config") -> Any:
    """Validate a mapping; the first errors are reported with key paths and close-match hints."""
    try:
        return schema.model_validate(raw)
    except ValidationError as error:
        lines = [describe_error(item, schema) for item in error.errors()]
        raise ConfigError(f"{source}: " + "; ".join(lines)) from None


def describe_error(item: Mapping[str, Any], schema: type[BaseModel]) -> str:
    """One readable line for one pydantic error: key path, what was given, what was expected."""
    location = [part for part in item["loc"] if not _is_internal(part)]
    key = _format_location(location)
    kind = item["type"]
    if kind == "extra_forbidden":
        hint = _closest_key(schema, location)
        return f"{key}: unknown key" + (f"; did you mean {hint}?" if hint else "")
    if kind == "missing":
        return f"{key}: required key is missing"
    given = item.get("input")
    message = item["msg"].removeprefix("Value error, ")
    if not key:
        return message
    if isinstance(given, dict) or "got" in message:
        return f"{key}: {message}"
    return f"{key}: {message} (got {given!r})"


def _is_internal(part: Any) -> bool:
    # pydantic adds the names of union members and validator kinds to locations
    # (``function-after[...]``, ``nullable[...]``): a user's own key with a bracket in it is not one of them
    return isinstance(part, str) and (_PYDANTIC_TAG.match(part) is not None or part in {"function-after", "literal"})


_PYDANTIC_TAG = re.compile(r"^[A-Za-z][\w-]*\[.+\]$")


def _format_location(location: list[Any]) -> str:
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _closest_key(schema: type[BaseModel], location: list[Any]) -> str | None:
    """The valid key nearest to the unknown last element of ``location``, as a full path."""
    if not location:
        return None
    model: Any = schema
    for part in location[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if _is_model(model) else None
        if field is None:
            return None
        model = _inner_model(field.annotation)
    if not _is_model(model):
        return None
    matches = difflib.get_close_matches(str(location[-1]), list(model.model_fields), n=1, cutoff=0.6)
    if not matches:
        return None
    return _format_location(location[:-1] + [matches[0]])


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside ``Optional[X]`` or ``list[X]``, or the annotation itself."""
    if _is_model(annotation):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        inner = _inner_model(arg)
        if _is_model(inner):
            return inner
    return annotation
