"""Issue 43's "every key that appears in >= 2 published configs is honoured": the keys of Oumi's own training
configs (every YAML under its repository's configs/ folders read as an Oumi training config), counted by file, with
the verdict of each that appears in two or more. Needs a snapshot of Oumi's repository (``--repo``).

    .venv/bin/python benchmarks/oumi_key_frequency.py --repo /work/.mirror/oumi-ai+oumi/repo
"""

from __future__ import annotations

import argparse
import collections
import subprocess

import yaml

from honing.interop.configs.dialects import detect_dialect
from honing.interop.configs.oumi_table import TABLE


def walk(values: object, group: str, seen: set[tuple[str, str]]) -> None:
    """Every (group, key) of ``values`` that Oumi's table names."""
    if not isinstance(values, dict) or group not in TABLE:
        return
    for name, value in values.items():
        seen.add((group, name))
        if group == "data":
            walk(value, "data.<split>", seen)
        elif group == "data.<split>" and name == "datasets" and isinstance(value, list):
            for item in value:
                walk(item, "data.<split>.datasets[]", seen)
        else:
            walk(value, f"{group}.{name}" if group else name, seen)


def main() -> None:
    """Print the count of training configs, of keys in two or more, and the ones neither honoured nor moot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="a git folder of Oumi's repository")
    args = parser.parse_args()
    git = ["git", "-C", args.repo]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    names = subprocess.run([*git, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True).stdout
    files = [f for f in names.split() if f.endswith((".yaml", ".yml")) and "configs/" in f]
    count: collections.Counter[tuple[str, str]] = collections.Counter()
    configs = 0
    for name in files:
        text = subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True, text=True).stdout
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if not isinstance(raw, dict) or "training" not in raw or detect_dialect(raw) != "oumi":
            continue
        configs += 1
        seen: set[tuple[str, str]] = set()
        walk(raw, "", seen)
        count.update(seen)
    frequent = {key: n for key, n in count.items() if n >= 2}
    verdicts = collections.Counter(TABLE[group][key][0] for group, key in frequent)
    print(f"Oumi@{head[:12]}: {configs} training configs; {len(frequent)} keys in two or more: {dict(verdicts)}")
    for (group, key), n in sorted(frequent.items()):
        verdict, why = TABLE[group][key]
        if verdict not in ("honoured", "moot"):
            print(f"  {group}:{key} in {n} files: {verdict}: {why}")


if __name__ == "__main__":
    main()
