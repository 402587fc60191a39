"""Extension points that the other systems' layer (``honing.interop``) fills, so the core calls them by a generic
name and never names them: reward-name schemes (``SCHEME:NAME`` in ``grpo.rewards``), adapters for reward functions
written to another system's signature, and readers of data source formats.

Each entry is a ``module:attribute`` path imported the first time it is used: registering costs nothing (the root
package ``honing`` imports ``honing.interop.registrations``, torch not loaded), and a run that never uses an entry
never imports its module. This module imports nothing of honing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache

#: ``scheme`` → the path of ``resolve(name_after_the_scheme, key) -> reward function``
REWARD_SCHEMES: dict[str, str] = {}

#: paths of ``adapt(fn, name) -> reward function | None``: a function imported by path that one of them recognises
#: (by its parameters) is wrapped to honing's reward signature; None: not its signature
REWARD_ADAPTERS: list[str] = []

#: ``data source format`` → the path of its reader (``honing.data.vision.source_readers.SourceFormatReader``)
SOURCE_FORMAT_READERS: dict[str, str] = {}


def register_reward_scheme(scheme: str, path: str) -> None:
    """Make ``SCHEME:NAME`` reward names resolve through the function at ``path``."""
    REWARD_SCHEMES[scheme] = path


def register_reward_adapter(path: str) -> None:
    """Try the adapter at ``path`` on every reward function imported by path."""
    if path not in REWARD_ADAPTERS:
        REWARD_ADAPTERS.append(path)


def register_source_format(source_format: str, path: str) -> None:
    """Read sources of ``format: SOURCE_FORMAT`` with the reader at ``path``."""
    SOURCE_FORMAT_READERS[source_format] = path


@cache
def load(path: str) -> object:
    """The object at ``module:attribute`` (imported once)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def reward_adapters() -> list[Callable[..., object]]:
    """The registered reward adapters, imported."""
    return [load(path) for path in REWARD_ADAPTERS]  # type: ignore[misc]
