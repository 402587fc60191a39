"""A user's function by import path (``package.module:function``), found from the working directory as well, or one
registered by name: the rewards and the tools of ``grpo`` name theirs these ways (each kind has its own table)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any, TypeVar

from honing.errors import ConfigError

Fn = TypeVar("Fn", bound=Callable[..., Any])


def import_callable(name: str, *, key: str, kind: str) -> Callable[..., Any]:
    """The callable at ``package.module:function``; a ConfigError naming ``key`` and the ``kind`` of thing it is."""
    module_name, _, attribute = name.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:  # the `honing` script does not put it there
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{key}: cannot import {kind} {name!r}: {error}") from None
    if not callable(fn):
        raise ConfigError(f"{key}: {kind} {name!r} is not callable")
    return fn


def register_in(table: MutableMapping[str, Fn], name: str) -> Callable[[Fn], Fn]:
    """Decorator: put the function in ``table`` under ``name`` (and leave it as it is)."""

    def add(fn: Fn) -> Fn:
        table[name] = fn
        return fn

    return add


def known_or_imported(table: MutableMapping[str, Fn], name: str, *, key: str, kind: str) -> Callable[..., Any]:
    """``table``'s function of ``name``, else the one at import path ``package.module:function``; a ConfigError
    naming ``key`` and the known names for any other name."""
    if name in table:
        return table[name]
    if ":" not in name:
        raise ConfigError(
            f"{key}: unknown {kind} {name!r}; expected a built-in ({', '.join(sorted(table))}) or an import path "
            "'package.module:function'"
        )
    return import_callable(name, key=key, kind=kind)
