"""The numbers issue 33 ("a house a newcomer can change") is judged by, for the working tree and a git revision
side by side: methods along each recipe's class chain, the files of ``honing/`` whose code names each trainer
setting, the ``data/`` modules that import a recipe or take one as an argument, the ``duplicates`` pairs inside
``honing/``, README lines, and whether CI builds the docs.

    python benchmarks/architecture_numbers.py --before b498dde
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

#: run in a tree's own interpreter path: each method's recipe class and the unique method names along its chain
COUNT_METHODS = """
import importlib, inspect, json
from honing.recipes import RECIPES
out = {}
for method, path in RECIPES.items():
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    names = {key for klass in cls.__mro__ if klass is not object for key, value in vars(klass).items()
             if isinstance(value, (staticmethod, classmethod, property)) or inspect.isfunction(value)
             or callable(getattr(value, "func", None))}
    out[method] = len(names)
fields = []
try:
    from honing.config.schema import TrainerSection
    fields = list(TrainerSection.model_fields)
except ImportError:
    pass
print(json.dumps({"methods": out, "trainer_fields": fields}))
"""


def code_only(path: str) -> str:
    """A Python file's code without its comments and string literals (docstrings included)."""
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    kept = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            kept.append(token.string)
    return " ".join(kept)


def python_files(root: str) -> list[str]:
    """Every ``.py`` file below ``root``."""
    return sorted(
        os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names if name.endswith(".py")
    )


def setting_files(tree: str, fields: list[str]) -> dict[str, int]:
    """For each trainer setting, how many files of ``honing/`` name it in their code."""
    codes = {path: code_only(path) for path in python_files(os.path.join(tree, "honing"))}
    return {field: sum(bool(re.search(rf"\b{field}\b", code)) for code in codes.values()) for field in fields}


def modules_taking_a_recipe(tree: str, folder: str, *, imports_count: bool) -> list[str]:
    """The modules below ``honing/<folder>`` with a function parameter named or typed recipe (and, with
    ``imports_count``, those importing ``honing.recipes``); modules defining a recipe class are left out."""
    found = []
    for path in python_files(os.path.join(tree, "honing", folder)):
        with open(path, encoding="utf-8") as handle:
            module = ast.parse(handle.read())
        if any(isinstance(node, ast.ClassDef) and node.name.endswith("Recipe") for node in ast.walk(module)):
            continue  # a recipe itself
        for node in ast.walk(module):
            imported = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            imported += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            imports = imports_count and any(name.startswith("honing.recipes") for name in imported)
            takes = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                arg.arg == "recipe" or "Recipe" in ast.unparse(arg.annotation or ast.Constant(""))
                for arg in node.args.args + node.args.kwonlyargs
            )
            if imports or takes:
                found.append(os.path.relpath(path, tree))
                break
    return found


def duplicate_pairs(tree: str) -> int | None:
    """The ``duplicates`` tool's pair count inside ``honing/`` (None where the tool is not installed)."""
    if shutil.which("duplicates") is None:
        return None
    done = subprocess.run(
        ["duplicates", "--most", "1", "--seconds", "120"],
        cwd=os.path.join(tree, "honing"),
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.match(r"(\d+) pairs", done.stdout.strip())
    return int(match.group(1)) if match else 0


def measure(tree: str) -> dict:
    """Every number for the checkout at ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-c", COUNT_METHODS], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    with open(os.path.join(tree, "README.md"), encoding="utf-8") as handle:
        readme = len(handle.read().splitlines())
    with open(os.path.join(tree, ".ci", "run"), encoding="utf-8") as handle:
        docs_in_ci = "make docs" in handle.read()
    files = setting_files(tree, counted["trainer_fields"])
    return {
        "methods per recipe class chain": counted["methods"],
        "files naming nonfinite_loss": files.get("nonfinite_loss"),
        "files naming each trainer setting": files,
        "data/ modules importing or taking a recipe": modules_taking_a_recipe(tree, "data", imports_count=True),
        "modules of honing/ taking a recipe object": modules_taking_a_recipe(tree, "", imports_count=False),
        "duplicates pairs inside honing/": duplicate_pairs(tree),
        "README lines": readme,
        "docs built in CI": docs_in_ci,
    }


def main() -> int:
    """Measure both trees and print them side by side."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare the working tree against")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="honing-architecture-")
    before_tree = os.path.join(root, "tree")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", before_tree, args.before], cwd=REPO, check=True)
    try:
        before, after = measure(before_tree), measure(REPO)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", before_tree], cwd=REPO, check=False)
        shutil.rmtree(root, ignore_errors=True)
    for key in before:
        if key == "files naming each trainer setting":
            continue
        print(f"{key}:\n  {args.before}: {before[key]}\n  working tree: {after[key]}")
    print("files naming each trainer setting (working tree):", json.dumps(after["files naming each trainer setting"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
