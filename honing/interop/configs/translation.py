"""What a translation from another system's config builds: honing's config as a plain dict, one refusal line per
key it cannot honour, one note per key honoured in honing's own way, and the defaults it filled in: the values the
other system's run has where its file says nothing, written where honing's own default differs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from honing.config.keys import section_type
from honing.config.schema import RunConfig


class Translation:
    """honing's config being built from a foreign one, with the refusals and notes found on the way."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.config: dict[str, Any] = {}
        self.refused: list[str] = []
        self.notes: list[str] = []
        self.defaults: dict[str, str] = {}  # honing key -> whose default it is, for keys the file did not set
        self.explicit: set[str] = set()

    def set(self, path: str, value: Any) -> None:
        """Set a dotted key of honing's config from the file (sections are created as needed); a default filled in
        at ``path`` or under it is no longer one."""
        self.explicit.add(path)
        for filled in [key for key in self.defaults if key == path or key.startswith(path + ".")]:
            del self.defaults[filled]
        self._write(path, value)

    def default(self, path: str, value: Any, whose: str) -> None:
        """Fill ``path`` with the other system's default ``value`` (``whose``: where it comes from, e.g. "TRL's
        SFTConfig.packing"), unless the file set it; ``convert`` lists every default filled in."""
        if path in self.explicit:
            return
        self.defaults[path] = whose
        self._write(path, value)

    def unset(self, path: str) -> None:
        """Remove a dotted key (and a default filled in there), so honing's own default applies."""
        *parents, last = path.split(".")
        node: Any = self.config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
        self.defaults.pop(path, None)

    def _write(self, path: str, value: Any) -> None:
        *parents, last = path.split(".")
        node = self.config
        for part in parents:
            if not isinstance(node.get(part), dict):  # a section written as null (model.lora: None) gets keys
                node[part] = {}
            node = node[part]
        node[last] = value

    def get(self, path: str, default: Any = None) -> Any:
        """A dotted key of honing's config as set so far, or ``default``."""
        node: Any = self.config
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def refuse(self, key: str, why: str) -> None:
        """Record that ``key`` of the foreign config cannot be honoured, and why (one line)."""
        self.refused.append(one_line(f"{key}: {why}"))

    def note(self, key: str, what: str) -> None:
        """Record how ``key`` of the foreign config is honoured when it has no key of its own in honing's."""
        self.notes.append(one_line(f"{key}: {what}"))

    def section(self, value: Any, prefix: str) -> Keys:
        """The keys of a foreign section, each to be taken or refused (``prefix`` names it in messages)."""
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            self.refuse(prefix, f"expected a mapping of keys, got {type(value).__name__}")
            value = {}
        return Keys(self, value, prefix)


class Keys:
    """One section of a foreign config: keys are taken one by one; ``done()`` refuses every key left."""

    def __init__(self, translation: Translation, values: Mapping[str, Any], prefix: str):
        self.translation = translation
        self.values = {str(name): value for name, value in values.items()}  # YAML allows keys such as 1 or true
        self.prefix = prefix
        self.taken: set[str] = set()

    def key(self, name: str) -> str:
        """The full foreign key path of ``name`` in this section."""
        return f"{self.prefix}.{name}" if self.prefix else name

    def has(self, name: str) -> bool:
        """True when the section sets ``name`` (to anything but null)."""
        return self.values.get(name) is not None

    def take(self, name: str, default: Any = None) -> Any:
        """The value of ``name`` (``default`` when absent or null), marked as handled."""
        self.taken.add(name)
        value = self.values.get(name)
        return default if value is None else value

    def peek(self, name: str, default: Any = None) -> Any:
        """The value of ``name`` without marking it handled."""
        value = self.values.get(name)
        return default if value is None else value

    def copy(self, name: str, path: str, convert: Any = None) -> None:
        """Take ``name`` and, when set, write it (through ``convert``) to honing's ``path``; a value ``convert``
        cannot take is refused in one line naming the key (never a traceback)."""
        if not self.has(name):
            self.take(name)
            return
        value = self.take(name)
        try:
            if convert in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
                raise TypeError(value)  # int(True), float of a list: not a number the file meant
            self.translation.set(path, convert(value) if convert else value)
        except (TypeError, ValueError, OverflowError):
            kind = getattr(convert, "__name__", "value")
            self.translation.refuse(self.key(name), f"{value!r} cannot be read as {kind} (for honing's {path})")

    def note(self, name: str, what: str) -> None:
        """Take ``name`` and, when set, note how it is honoured (or why it is moot) in one line."""
        if self.has(name):
            self.translation.note(self.key(name), what)
        self.taken.add(name)

    def number(self, name: str, kind: type, default: Any = None) -> Any:
        """The value of ``name`` read as ``kind`` (int or float; ``default`` when absent or null), marked as handled;
        a value that is not a number is refused in one line and ``default`` returned."""
        self.taken.add(name)
        value = self.values.get(name)
        return default if value is None else read_number(self.translation, self.key(name), value, kind, default)

    def names(self, name: str) -> list[str] | None:
        """The value of ``name`` as a list of strings (a single string is a list of one), marked as handled; any
        other value is refused in one line (None returned)."""
        self.taken.add(name)
        value = self.values.get(name)
        if value is None:
            return None
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(item, (str, int, float)) for item in values):
            self.translation.refuse(self.key(name), f"{value!r}: expected a list of names")
            return None
        return [str(item) for item in values]

    def refuse(self, name: str, why: str) -> None:
        """Take ``name`` and refuse it when set."""
        if self.has(name):
            self.translation.refuse(self.key(name), why)
        self.taken.add(name)

    def allow(self, name: str, allowed: tuple[Any, ...], why: str) -> Any:
        """Take ``name``; a value outside ``allowed`` (null always allowed) is refused with ``why``."""
        value = self.take(name)
        if value is not None and value not in allowed:
            self.translation.refuse(self.key(name), f"{value!r} {why}")
        return value

    def done(self, why: str = "honing has no key for it") -> None:
        """Refuse every key of the section not taken."""
        for name in self.values:
            if name not in self.taken:
                self.translation.refuse(self.key(name), f"not translated: {why}")


def read_number(t: Translation, key: str, value: Any, kind: type, default: Any = None) -> Any:
    """``value`` as ``kind`` (int or float), or ``default`` with one refusal line naming ``key`` when it is not a
    number (a bool, a mapping, ``"auto"``, ...)."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(value)
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        t.refuse(key, f"{value!r} cannot be read as {kind.__name__}")
        return default


def schema_has(path: str) -> bool:
    """True when honing's run config has the dotted key ``path`` (``[]`` steps into a list of sections), so a
    translation writes only keys this version of honing reads."""
    model: Any = RunConfig
    for part in path.replace("[]", "").split("."):
        if model is None or part not in model.model_fields:
            return False
        model, _ = section_type(model.model_fields[part].annotation)
    return True


def one_line(text: str) -> str:
    """``text`` with its line breaks written as ``\\n``: a key or value from the file may hold one (a YAML key
    ``"\\n"``), and every refusal or note is one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")
