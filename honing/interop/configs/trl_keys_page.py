"""``docs/reference/trl-keys.md``: every field of transformers' ``TrainingArguments`` and of TRL's config classes
with its verdict, and the counts per class, written from the tables (``trl_args.table``).

    python -m honing.interop.configs.trl_keys_page > docs/reference/trl-keys.md
"""

from __future__ import annotations

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import counts
from honing.interop.configs.trl_args import CLASSES, table
from honing.interop.configs.trl_key_tests import WALK, shown_by

SOURCE, KEYS = key_table("trl")

REGENERATE = "python -m honing.interop.configs.trl_keys_page > docs/reference/trl-keys.md"


def cell(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|")


def tests_cell(config_class: str, key: str, verdict: str) -> str:
    """A honoured row's tests: the walk's case (``[Class.key]``), then its feature's own tests by name."""
    if verdict != "honoured":
        return ""
    walk, *features = shown_by(config_class, key)
    return ", ".join([f"walk `[{config_class}.{key}]`", *(f"`{test}`" for test in features)])


def page() -> str:
    """The page's Markdown."""
    lines = [
        "# TRL and transformers training arguments",
        "",
        "<!-- Generated from honing/interop/configs/trl_args.py's tables by honing/interop/configs/trl_keys_page.py:",
        f"     do not edit by hand. Regenerate with: {REGENERATE} -->",
        "",
        f"Every field of transformers' `TrainingArguments` and of TRL's config classes ({SOURCE}), as",
        "`honing.interop.configs.trl_args.translate_trl_args(values, config_class)` reads a class's keyword arguments:",
        "**honoured** (the honing key it becomes), **moot** (why honing needs no such setting: a note when set) or",
        "**refused** (why, and what to give instead: one line when set). A field left at its default asks for nothing;",
        "where the class's default differs from honing's, the default is written into the translation and listed.",
        "`tests/interop/configs/test_trl_schema_walk.py` walks the installed classes' fields (a new field fails it",
        'until it has a row) and translates each honoured field with a value other than its default: "shown by" names',
        f"that case (`walk`: `{WALK}[Class.key]`) and the tests of the feature behind the field.",
        "",
        "| class | method | fields | honoured | moot | refused |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, (method, _) in CLASSES.items():
        found = counts(table(name))
        lines.append(f"| `{name}` | `{method}` | {sum(found.values())} | {found['honoured']} | {found['moot']} | "
                     f"{found['refused']} |")  # fmt: skip
    for name in CLASSES:
        rows = table(name)
        keys = KEYS[name] if name != "TrainingArguments" else KEYS["TrainingArguments"]
        own = [key for key in rows if name == "TrainingArguments" or key in keys or rows[key] != table(
            "TrainingArguments").get(key)]  # fmt: skip
        title = (
            "every field"
            if name == "TrainingArguments"
            else "its own fields, and those whose verdict or default differ"
        )
        lines += [
            "",
            f"## `{name}`",
            "",
            f"{title.capitalize()}; the rest as `TrainingArguments`."
            if name != "TrainingArguments"
            else "The base of every TRL config class.",
            "",  # fmt: skip
            "| field | default | verdict | becomes / why | shown by |",
            "| --- | --- | --- | --- | --- |",
        ]
        for key in own:
            verdict, why = rows[key]
            default = {**KEYS["TrainingArguments"], **KEYS[name]}[key][1]
            lines.append(
                f"| `{key}` | `{cell(default)}` | {verdict} | {cell(why)} | {tests_cell(name, key, verdict)} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(page(), end="")
