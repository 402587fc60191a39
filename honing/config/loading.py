"""Turn a YAML file plus dotted overrides into a validated RunConfig, with errors a user can act on."""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from honing.config.custom_recipe import declared_sections, with_sections
from honing.config.errors import ConfigError
from honing.config.optimizers import OPTIONAL_KEYS, resolve_optimizer
from honing.config.renamed_keys import renamed_key_message
from honing.config.schema import RunConfig

log = logging.getLogger(__name__)

_Schema = TypeVar("_Schema", bound=BaseModel)
#: a node of a YAML config as read: a section's mapping or a list
_Node = dict[str, Any] | list[Any]


def load_config(
    path: str | None,
    overrides: Iterable[str] = (),
    *,
    schema: type[_Schema] = RunConfig,
    sections: Mapping[str, type] | None = None,
) -> _Schema:
    """Read honing's YAML config at ``path``, apply ``key.path=value`` overrides, validate against ``schema``
    (``sections``: config sections of the caller's own, as ``validate`` takes them).

    Another system's config file (Oumi, olmOCR) is read by ``honing.interop.configs.load_any_config``."""
    raw = read_yaml(path) if path else {}
    apply_overrides(raw, overrides)
    return validate(raw, schema=schema, source=path or "<overrides>", sections=sections)


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> None:
    """The command line's overrides in order: ``key.path=value`` sets, ``~key.path`` removes (Hydra's form); then a
    changed ``optim.name`` drops the file's keys that only its former optimizer read."""
    given: set[str] = set()  # the key paths the command line sets
    for override in overrides:
        if override.startswith("~"):
            remove_key(raw, override)
        else:
            apply_override(raw, override)
            given.add(format_key_path(parse_key_path(override.partition("=")[0].strip(), override)))
    drop_other_optimizers_keys(raw, given)


def remove_key(raw: dict[str, Any], override: str) -> None:
    """``~a.b.c`` (Hydra's form; ``~a.b.c=...`` too): remove the key from the file's config, so it takes its default
    (a list item by its index: ``~data.train.sources[1]``); a key the config does not hold is a ConfigError."""
    key = override[1:].partition("=")[0].strip()
    if not key:
        raise ConfigError(f"override {override!r}: expected ~key.path (the key to remove)")
    parts = parse_key_path(key, override)
    node: _Node = raw
    for depth, part in enumerate(parts):
        if not _holds(node, part):
            raise ConfigError(
                f"override {override!r}: {format_key_path(parts[: depth + 1])} is not in the config, so there is "
                "nothing to remove"
            )
        if depth == len(parts) - 1:
            del node[part]
            return
        node = node[part]


def _holds(node: object, part: str | int) -> bool:
    """Whether ``node`` (a section or a list) holds ``part`` (a key or an index)."""
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    if isinstance(node, list):
        return isinstance(part, int) and -len(node) <= part < len(node)
    return False


def drop_other_optimizers_keys(raw: dict[str, Any], given: set[str]) -> None:
    """When the command line sets ``optim.name``, the file's ``optim.*`` keys that only its own optimizer read
    (``betas`` for AdamW, ``momentum`` for SGD, ...) are dropped, with one info line naming them; the same key set
    on the command line is still refused by the schema."""
    optim = raw.get("optim")
    if "optim.name" not in given or not isinstance(optim, dict):
        return
    try:
        name, _ = resolve_optimizer(str(optim.get("name")))
    except ValueError:
        return  # the schema names the bad optimizer
    dropped = [
        key
        for key, users in OPTIONAL_KEYS.items()
        if key in optim and name not in users and f"optim.{key}" not in given
    ]
    for key in dropped:
        del optim[key]
    if dropped:
        log.info(
            "optim.name=%s from the command line: the config file's %s dropped (not read by %s)",
            optim["name"],
            ", ".join(f"optim.{key}" for key in dropped),
            name,
        )


def read_yaml(path: str) -> dict[str, Any]:
    """Parse a YAML mapping from ``path``; a missing file or bad YAML is a ConfigError."""
    if not os.path.exists(path):
        raise ConfigError(f"{path}: config file not found")
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a folder; expected a YAML config file")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML: {yaml_problem(error)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(data).__name__}")
    return data


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error on one line: where (line, column) and what, without the quoted source and its caret."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem is None or mark is None:
        return " ".join(str(error).split())
    context = getattr(error, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a nested mapping; the value is parsed as YAML (so lists and numbers work).

    A list item is reached by its index, as Hydra / OmegaConf users write it: ``data.train.sources[0].path=x``
    (or ``data.train.sources.0.path=x``)."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r}: expected key.path=value")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {yaml_problem(error)}") from None
    parts = parse_key_path(key.strip(), override)
    node: _Node = raw
    for depth, part in enumerate(parts[:-1]):
        node = _child(node, part, parts[: depth + 1], override, next_is_index=isinstance(parts[depth + 1], int))
    last = parts[-1]
    if isinstance(node, list):
        _check_index(node, last, parts, override)
        node[last] = value  # type: ignore[index]
    else:
        node[last] = value


_KEY_PART = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]|(\.)")


def parse_key_path(key: str, override: str = "") -> list[str | int]:
    """``a.b[0].c`` (or ``a.b.0.c``) as ``["a", "b", 0, "c"]``; a malformed path is a ConfigError."""
    parts: list[str | int] = []
    position = 0
    expect_name = True
    while position < len(key):
        match = _KEY_PART.match(key, position)
        if match is None or (match.group(3) and expect_name) or (match.group(1) and not expect_name):
            raise ConfigError(f"override {override or key!r}: cannot read the key path {key!r} at {key[position:]!r}")
        name, index = match.group(1), match.group(2)
        if name is not None:
            parts.append(int(name) if name.isdigit() and parts else name)
            expect_name = False
        elif index is not None:
            if not parts:
                raise ConfigError(f"override {override or key!r}: a key path starts with a key, not an index")
            parts.append(int(index))
        else:
            expect_name = True
        position = match.end()
    if expect_name:
        raise ConfigError(f"override {override or key!r}: the key path {key!r} ends with a dot")
    return parts


def _child(node: _Node, part: str | int, path: list[str | int], override: str, *, next_is_index: bool) -> _Node:
    """The mapping or list under ``part`` of ``node`` (a missing mapping is created; a missing list cannot be)."""
    if isinstance(node, list):
        _check_index(node, part, path, override)
        child = node[part]  # type: ignore[index]
    else:
        if isinstance(part, int):
            raise ConfigError(f"override {override!r}: {format_key_path(path[:-1])} is a section, not a list")
        child = node.get(part)
        if child is None:
            if next_is_index:
                raise ConfigError(
                    f"override {override!r}: {format_key_path(path)} is not set in the config, so it has no item "
                    f"to change; set the whole list, e.g. '{format_key_path(path)}=[...]'"
                )
            child = node[part] = {}
    if next_is_index and not isinstance(child, list):
        raise ConfigError(f"override {override!r}: {format_key_path(path)} is {child!r}, not a list")
    if not next_is_index and isinstance(child, list):
        raise ConfigError(f"override {override!r}: {format_key_path(path)} is a list; index it as [N]")
    if not next_is_index and not isinstance(child, dict):
        raise ConfigError(f"override {override!r}: {format_key_path(path)} is {child!r}, not a section")
    return child


def _check_index(items: list[Any], index: str | int, path: list[str | int], override: str) -> None:
    if not isinstance(index, int):
        raise ConfigError(f"override {override!r}: {format_key_path(path[:-1])} is a list; index it as [N]")
    if not -len(items) <= index < len(items):
        raise ConfigError(
            f"override {override!r}: {format_key_path(path)} does not exist; "
            f"{format_key_path(path[:-1])} has {len(items)} item(s)"
        )


def format_key_path(parts: list[Any]) -> str:
    """``["a", "b", 0, "c"]`` as ``a.b[0].c``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate(
    raw: Mapping[str, Any],
    *,
    schema: type[_Schema] = RunConfig,
    source: str = "config",
    sections: Mapping[str, type] | None = None,
) -> _Schema:
    """Validate a mapping; the first errors are reported with key paths and close-match hints.

    A run config also accepts the config sections its recipe class declares (``config_sections``) and
    ``sections`` (name → pydantic model or dataclass), each validated like honing's own
    (``honing.config.custom_recipe``)."""
    if isinstance(schema, type) and issubclass(schema, RunConfig):
        try:
            schema = with_sections(schema, {**declared_sections(raw), **(sections or {})})
        except ValueError as error:
            raise ConfigError(f"{source}: {error}") from None
    try:
        return schema.model_validate(raw)
    except ValidationError as error:
        lines = [describe_error(item, schema) for item in error.errors()]
        raise ConfigError(f"{source}: " + "; ".join(lines)) from None


def describe_error(item: Mapping[str, Any], schema: type[BaseModel]) -> str:
    """One readable line for one pydantic error: key path, what was given, what was expected."""
    location = [part for part in item["loc"] if not _is_internal(part)]
    key = format_key_path(location)
    kind = item["type"]
    if kind == "extra_forbidden":
        renamed = renamed_key_message(key)
        if renamed is not None:
            return renamed
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


def _is_internal(part: str | int) -> bool:
    # pydantic adds the names of union members and validator kinds to locations
    # (``function-after[...]``, ``nullable[...]``): a user's own key with a bracket in it is not one of them
    return isinstance(part, str) and (_PYDANTIC_TAG.match(part) is not None or part in {"function-after", "literal"})


_PYDANTIC_TAG = re.compile(r"^[A-Za-z][\w-]*\[.+\]$")


def _closest_key(schema: type[BaseModel], location: list[Any]) -> str | None:
    """The valid key nearest to the unknown last element of ``location``, as a full path."""
    if not location:
        return None
    model: object = schema
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
    return format_key_path(location[:-1] + [matches[0]])


def _is_model(value: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _inner_model(annotation: object) -> object:
    """The BaseModel inside ``Optional[X]`` or ``list[X]``, or the annotation itself."""
    if _is_model(annotation):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        inner = _inner_model(arg)
        if _is_model(inner):
            return inner
    return annotation
