"""Extension points that the other systems' layer (``honing.interop``) fills, so the core calls them by a generic
name and never names them: reward-name schemes (``SCHEME:NAME`` in ``grpo.rewards``), adapters for reward functions
written to another system's signature, readers of data source formats, adapters of recipe classes whose steps are
written in another system's form, and adapters of callbacks written with another system's event names.

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

#: paths of ``adapt(cls) -> None``: each runs on every recipe class as it is defined and, where the class writes its
#: steps in another system's form (their signatures, the parts they read from the recipe, steps honing's recipe does
#: not have), gives them honing's arguments and steps in place; a class in honing's form is left as it is
RECIPE_ADAPTERS: list[str] = []

#: paths of ``adapt(callback) -> callback``: every callback a recipe's Trainer registers passes through each in turn
#: (one written with another system's event names comes back answering honing's; any other comes back as it is)
CALLBACK_ADAPTERS: list[str] = []


def register_reward_scheme(scheme: str, path: str) -> None:
    """Make ``SCHEME:NAME`` reward names resolve through the function at ``path``."""
    REWARD_SCHEMES[scheme] = path


def register_reward_adapter(path: str) -> None:
    """Try the adapter at ``path`` on every reward function imported by path."""
    if path not in REWARD_ADAPTERS:
        REWARD_ADAPTERS.append(path)


def register_recipe_adapter(path: str) -> None:
    """Run the adapter at ``path`` on every recipe class as it is defined."""
    if path not in RECIPE_ADAPTERS:
        RECIPE_ADAPTERS.append(path)


def register_callback_adapter(path: str) -> None:
    """Pass every callback a recipe's Trainer registers through the adapter at ``path``."""
    if path not in CALLBACK_ADAPTERS:
        CALLBACK_ADAPTERS.append(path)


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


def adapt_recipe_class(cls: type) -> None:
    """Run every registered recipe adapter on ``cls``, in place."""
    for path in RECIPE_ADAPTERS:
        load(path)(cls)  # type: ignore[operator]


def adapt_callback(callback: object) -> object:
    """``callback`` after every registered callback adapter, in turn."""
    for path in CALLBACK_ADAPTERS:
        callback = load(path)(callback)  # type: ignore[operator]
    return callback
