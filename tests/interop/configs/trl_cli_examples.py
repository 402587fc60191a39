"""TRL's own CLI examples (``foreign/trl/commands.md``: code blocks of TRL's docs and its scripts' command lines,
verbatim) read as ``trl <command> --config FILE`` would read them: each as (where, ``--from`` name, key/values), the
values typed by the field they set, as TRL's ``HfArgumentParser`` types a command line's strings."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.trl_cli import COMMANDS
from honing.interop.configs.trl_method_keys import class_fields

KEYS = key_table("trl_script").keys
FOLDER = Path(__file__).resolve().parent / "foreign" / "trl"
# a script of TRL's repository -> the --from name of the trainer it runs
SCRIPTS = {
    "trl/scripts/sft.py": "trl-sft",
    "trl/scripts/dpo.py": "trl-dpo",
    "trl/scripts/kto.py": "trl-kto",
    "examples/scripts/kto.py": "trl-kto",
    "examples/scripts/orpo.py": "trl-orpo",
    "examples/scripts/cpo.py": "trl-cpo",
    "examples/scripts/reward_modeling.py": "trl-reward",
    "examples/scripts/gkd.py": "trl-gkd",
    "examples/scripts/gspo.py": "trl-grpo",
}


def field_types(command: str) -> dict[str, str]:
    """Every field the command's parser reads: key -> its type as the source writes it."""
    fields = {key: kind for key, (kind, _) in class_fields(COMMANDS[command]).items()}
    for group in KEYS.values():
        fields.update({key: kind for key, (kind, _) in group.items()})
    return fields


def typed(kind: str, token: str) -> Any:
    """A command line's string as the field's type reads it (argparse's ``type``)."""
    first = kind.split(" | ")[0]
    if first == "bool" or kind == "bool | None":
        return token.lower() in ("true", "1", "yes")
    if first == "int":
        return int(token)
    if first == "float":
        return float(token)
    return token


def arguments(tokens: list[str], command: str) -> dict[str, Any]:
    """``--key value`` (or ``--key=value``), ``--flag`` (true), ``--no_flag`` (false), ``--list a b`` as a key/value
    mapping."""
    kinds, values, index = field_types(command), {}, 0
    tokens = [part for token in tokens for part in (token.split("=", 1) if token.startswith("--") else [token])]
    while index < len(tokens):
        key = tokens[index].removeprefix("--")
        following = []
        while index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
            index += 1
            following.append(tokens[index])
        index += 1
        kind = kinds.get(key, "str")
        if not following and key.startswith("no_") and key[3:] in kinds:
            values[key[3:]] = False
        elif not following:
            values[key] = True
        elif "list" in kind.split(" | ")[0] or len(following) > 1:
            values[key] = following
        else:
            values[key] = typed(kind, following[0])
    return values


def commands(block: str) -> list[list[str]]:
    """The commands of a shell block, each as its tokens (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", block)
    return [tokens for line in joined.splitlines() if (tokens := shlex.split(line, comments=True))]


def run_of(tokens: list[str]) -> tuple[str | None, list[str]]:
    """The --from name a command runs and its trainer's arguments; (None, []) for another command."""
    if tokens[:1] == ["trl"] and f"trl-{tokens[1]}" in COMMANDS:
        return f"trl-{tokens[1]}", tokens[2:]
    for index, token in enumerate(tokens):
        if token in SCRIPTS:  # python SCRIPT ... or accelerate launch [its options] SCRIPT ...
            return SCRIPTS[token], tokens[index + 1 :]
    return None, []


def examples() -> list[tuple[str, str, dict[str, Any]]]:
    """(where, --from name, key/values) for every example: a YAML block with the `trl X --config` line after it, or
    a command line with its arguments."""
    text = (FOLDER / "commands.md").read_text()
    found, pending = [], None
    for index, (where, lang, body) in enumerate(re.findall(r"### (\S+)\n```(bash|yaml)\n(.*?)```", text, re.S)):
        if lang == "yaml":
            pending = (f"{where} block {index}", yaml.safe_load(body))
            continue
        for tokens in commands(body):
            command, rest = run_of(tokens)
            if command is None:
                continue
            if rest[:1] == ["--config"]:  # the launch line of the YAML block above
                if pending is not None:
                    found.append((pending[0], command, pending[1]))
                    pending = None
            else:
                found.append((f"{where} block {index}", command, arguments(rest, command)))
    return found
