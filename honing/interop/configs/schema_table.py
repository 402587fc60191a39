"""A foreign schema's keys, each with its verdict: honoured (a honing feature reads it), moot (honing's own engine
makes it unneeded, with why) or refused (honing cannot do what it asks, with why).

The translators of axolotl's and LLaMA-Factory's files read their honoured keys themselves; ``finish`` then walks
every key of a section the translator left: a moot key set to anything but its schema default gets a note, a refused
one a refusal, a key the schema does not have a refusal naming the schema's source. A honoured key left unread is a
bug of the translator, not of the user's file, and raises.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Mapping
from typing import Literal

from honing.interop.configs.translation import Keys

Verdict = Literal["honoured", "moot", "refused"]
# a value a config file or a schema default holds (YAML / JSON scalars, lists and mappings of them)
Value = str | int | float | bool | None | list["Value"] | dict[str, "Value"]
Entry = tuple[Verdict, str]  # the verdict and what the key becomes (honoured) or why (moot, refused)


def honoured(what: str, *keys: str) -> dict[str, Entry]:
    """Table rows: ``keys`` read by the translator, becoming ``what``."""
    return {key: ("honoured", what) for key in keys}


def honoured_in(section: str, *keys: str) -> dict[str, Entry]:
    """Table rows: ``keys`` read by the translator into honing's ``section`` under the same name (``dpo.beta``)."""
    return {key: ("honoured", f"{section}.{key}") for key in keys}


def moot(why: str, *keys: str) -> dict[str, Entry]:
    """Table rows: ``keys`` honing does not need, and ``why``."""
    return {key: ("moot", why) for key in keys}


def refused(why: str, *keys: str) -> dict[str, Entry]:
    """Table rows: ``keys`` honing cannot honour when set, and ``why``."""
    return {key: ("refused", why) for key in keys}


def schema_default(text: str) -> Value:
    """A default as the schema's source writes it (``"None"``, ``"'cosine'"``, ``"512"``) as a value; the text itself
    when it is not a literal (``TRLConfig()``, ``REQUIRED``)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def is_unset(value: Value, default_text: str) -> bool:
    """True when ``value`` asks for nothing: null, empty, its schema default, or false where the default is null."""
    if value is None or value in ("", [], {}):
        return True
    default = schema_default(default_text)
    if value is False and default in (None, False):
        return True
    return value == default and isinstance(value, bool) == isinstance(default, bool)  # 1 is not True here


def finish(keys: Keys, table: Mapping[str, Entry], schema: Mapping[str, tuple[str, str]], source: str) -> None:
    """Every key of ``keys`` the translator did not take: a note (moot), a refusal (refused, or not in ``schema``,
    whose ``source`` is named); nothing for a key left at its default. A honoured key left unread is a bug of the
    translator (raised), unless the file is refused already."""
    t = keys.translation
    for name, value in keys.values.items():
        if name in keys.taken:
            continue
        keys.taken.add(name)
        if name not in schema:
            t.refuse(keys.key(name), f"not a key of {source}'s schema; check its spelling")
            continue
        verdict, why = table[name]
        if is_unset(value, schema[name][1]):
            continue
        if verdict == "moot":
            t.note(keys.key(name), why)
        elif verdict == "refused":
            t.refuse(keys.key(name), why)
        elif not t.refused:  # a translator stops reading a section at its first refusal; the file is refused anyway
            raise RuntimeError(f"{keys.key(name)}: honoured by the table ({why}) but not read by the translator")


def counts(table: Mapping[str, Entry]) -> Counter[str]:
    """How many keys of a table are honoured, moot and refused."""
    return Counter(verdict for verdict, _ in table.values())
