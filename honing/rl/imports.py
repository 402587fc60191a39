"""A user's function by import path (``package.module:function``), found from the working directory as well: the
rewards and the tools of ``grpo`` name theirs this way."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from honing.errors import ConfigError


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
