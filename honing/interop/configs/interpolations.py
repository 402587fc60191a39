"""OmegaConf's references inside one config file (``${training.output_dir}/runs``, ``${model.model_max_length}``),
resolved as Oumi's loader (OmegaConf) resolves them before anything reads the config: a value that is only a
reference takes the referenced value with its type; a reference inside a longer string is replaced by its text.
Resolvers (``${oc.env:HOME}``) and references to keys the file lacks stay as written, for the key's reader to
refuse in one line."""

from __future__ import annotations

import re
from typing import Any

REFERENCE = re.compile(r"\$\{([A-Za-z_][\w]*(?:\.[\w]+)*)\}")
#: references followed this deep are a cycle (``a: ${b}``, ``b: ${a}``): left as written
MAX_DEPTH = 16
_MISSING = object()


def resolve_interpolations(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every absolute ``${a.b.c}`` reference to another key of it resolved."""

    def lookup(path: str) -> Any:
        node: Any = raw
        for part in path.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _MISSING
        return node

    def resolve(value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            return value
        if isinstance(value, dict):
            return {key: resolve(item, depth) for key, item in value.items()}
        if isinstance(value, list):
            return [resolve(item, depth) for item in value]
        if not isinstance(value, str) or "${" not in value:
            return value
        whole = REFERENCE.fullmatch(value)
        if whole:
            target = lookup(whole[1])
            return value if target is _MISSING else resolve(target, depth + 1)

        def text(match: re.Match[str]) -> str:
            target = lookup(match[1])
            return match[0] if target is _MISSING else str(resolve(target, depth + 1))

        return REFERENCE.sub(text, value)

    return resolve(raw, 0)
