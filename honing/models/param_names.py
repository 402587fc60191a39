"""Parameter names as the user writes them in a config, and the fnmatch patterns that select them."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence

from torch import nn

from honing.models.wrappers import unwrap_model

# peft names a wrapped model's parameters ``base_model.model.<the transformers name>``.
PEFT_PREFIX = "base_model.model."
# How many names an error message lists as examples.
EXAMPLES = 12


def parameter_name(name: str) -> str:
    """A parameter's name as the user writes it: the transformers name, without peft's wrapper prefix."""
    return name[len(PEFT_PREFIX) :] if name.startswith(PEFT_PREFIX) else name


def named_parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` pairs named by ``parameter_name``, inside any wrapper (tied weights once)."""
    for name, param in unwrap_model(model).named_parameters():
        yield parameter_name(name), param


def matches(name: str, patterns: Sequence[str]) -> bool:
    """True when ``name`` matches any fnmatch-style pattern (``*`` also spans dots)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def example_names(names: Sequence[str]) -> str:
    """The first few of ``names`` for an error message."""
    shown = ", ".join(names[:EXAMPLES])
    return shown + (", ..." if len(names) > EXAMPLES else "")
