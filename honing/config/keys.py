"""Key paths of the run config: every leaf key of a schema, and an opt-in record of which keys a run reads.

A key path is dotted, with ``[]`` for any item of a list of sections: ``data.train.sources[].format``,
``callbacks.custom[].kwargs``. A list of plain values (``model.freeze_layers``) and a mapping (``model.config``,
``callbacks.custom[].kwargs``) are one key each.

``track_reads(config)`` records every attribute read of a field of a config section while it is open::

    with track_reads(config) as reads:
        recipe.run()
    reads.keys  # {"trainer.max_duration", "data.train.sources[].path", ...}

Dumping a section (``section.model_dump()``) hands all of it to the caller, so it counts as reading every key
under it; dumping the whole config (to save or log it) does not. When no tracker is open the sections carry no
hook at all: the hooks are installed on ``Section`` on entry and removed on exit, so tracking costs nothing
when off.
"""

from __future__ import annotations

import threading
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from honing.config.schema import Section

_lock = threading.Lock()
_active: KeyReads | None = None


class KeyReads:
    """The key paths read while a ``track_reads`` block was open."""

    def __init__(self, root: BaseModel):
        self.root = root
        self.keys: set[str] = set()
        self._paths: dict[int, tuple[str, frozenset[str]]] = {}
        self._register(root, "")

    def _register(self, model: BaseModel, path: str) -> None:
        self._paths[id(model)] = (path, frozenset(type(model).model_fields))
        for name in type(model).model_fields:
            value = model.__dict__.get(name)
            child = f"{path}.{name}" if path else name
            if isinstance(value, BaseModel):
                self._register(value, child)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, BaseModel):
                        self._register(item, child + "[]")

    def read(self, model: BaseModel, name: str) -> None:
        """Record that field ``name`` of ``model`` was read (ignored for sections outside the tracked config)."""
        entry = self._paths.get(id(model))
        if entry is not None and name in entry[1]:
            self.keys.add(f"{entry[0]}.{name}" if entry[0] else name)

    def dumped(self, model: BaseModel, names: Iterable[str]) -> None:
        """Record every key under the fields ``names`` of ``model`` (a section handed over whole)."""
        entry = self._paths.get(id(model))
        if entry is None or not entry[0]:  # the whole config: saved or logged, not used
            return
        for name in names:
            if name not in entry[1]:
                continue
            self.read(model, name)
            value = model.__dict__.get(name)
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, BaseModel):
                    self.dumped(item, type(item).model_fields)


def _tracked_getattribute(self: BaseModel, name: str) -> object:
    value = object.__getattribute__(self, name)
    tracker = _active
    if tracker is not None and not name.startswith("_"):
        tracker.read(self, name)
    return value


def _tracked_model_dump(self: BaseModel, *args: object, **kwargs: object) -> dict[str, Any]:
    result = BaseModel.model_dump(self, *args, **kwargs)
    tracker = _active
    if tracker is not None:
        tracker.dumped(self, list(result))
    return result


@contextmanager
def track_reads(config: BaseModel) -> Iterator[KeyReads]:
    """Record the key paths of ``config`` read inside the block (one tracker at a time, any thread's reads)."""
    global _active
    with _lock:
        if _active is not None:
            raise RuntimeError("track_reads is already recording; nest nothing inside it")
        _active = KeyReads(config)
        reads = _active
        Section.__getattribute__ = _tracked_getattribute  # type: ignore[method-assign,assignment]
        Section.model_dump = _tracked_model_dump  # type: ignore[method-assign,assignment]
    try:
        yield reads
    finally:
        with _lock:
            del Section.__getattribute__
            del Section.model_dump
            _active = None


def leaf_keys(schema: type[BaseModel], prefix: str = "") -> list[str]:
    """Every leaf key path of ``schema``, in field order; sections (also optional ones, and lists of them) are
    walked into, every other value is one key."""
    keys: list[str] = []
    for name, info in schema.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        model, is_list = section_type(info.annotation)
        if model is None:
            keys.append(path)
        else:
            keys.extend(leaf_keys(model, path + ("[]" if is_list else "")))
    return keys


def section_type(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The section class inside ``X``, ``Optional[X]`` or ``list[X]`` (and whether it is a list), else None.

    A union of a section with a plain type is not a section (it is given as one value)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and len(args) == 1:
        model, _ = section_type(args[0])
        return model, model is not None
    if args and origin is not list and origin is not dict:
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            return section_type(members[0])
    return None, False
