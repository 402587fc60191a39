"""The numbers of the house: for the working tree and a git revision side by side (issue 33's: methods along each
recipe's class chain, the files of ``honing/`` whose code names each trainer setting, the ``data/`` modules that import
a recipe or take one as an argument, the ``duplicates`` pairs inside ``honing/``, README lines, whether CI builds the
docs), and the ones ``docs/architecture.md`` shows between its generated markers (``current()``: read from the
source, nothing imported), which ``--write`` rewrites there.

    python benchmarks/architecture_numbers.py --before b498dde
    python benchmarks/architecture_numbers.py --write [--at HEAD]
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
from datetime import date

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PAGE = os.path.join(REPO, "docs", "architecture.md")
sys.path.insert(0, HERE)

import architecture_page  # noqa: E402
from class_chains import chain_methods  # noqa: E402

#: the most methods a class may have along its chain of honing classes (issue 46)
CHAIN_LIMIT = 30

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


def parsed_modules(tree: str) -> dict[str, ast.Module]:
    """Every Python file of ``honing/``, parsed."""
    modules = {}
    for path in python_files(os.path.join(tree, "honing")):
        with open(path, encoding="utf-8") as handle:
            modules[path] = ast.parse(handle.read())
    return modules


def bare_any_annotations(modules: dict[str, ast.Module]) -> int:
    """Annotations that are ``Any`` and nothing else (a parameter's, a return's, a variable's)."""

    def bare(annotation: ast.expr | None) -> bool:
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return annotation.value.strip() in ("Any", "typing.Any")
        return isinstance(annotation, ast.Name | ast.Attribute) and ast.unparse(annotation) in ("Any", "typing.Any")

    count = 0
    for module in modules.values():
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                every = [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    arguments.vararg,
                    arguments.kwarg,
                ]
                count += sum(bare(argument.annotation) for argument in every if argument is not None)
                count += bare(node.returns)
            elif isinstance(node, ast.AnnAssign):
                count += bare(node.annotation)
    return count


def recipe_classes(modules: dict[str, ast.Module], tree: str) -> list[str]:
    """The recipe classes ``honing.recipes.RECIPES`` names, qualified, in its order without repeats (none when the
    table is gone)."""
    module = modules.get(os.path.join(tree, "honing", "recipes", "__init__.py"))
    for node in ast.walk(module) if module is not None else ():
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "RECIPES" and isinstance(node.value, ast.Dict):
            paths = [ast.literal_eval(value).replace(":", ".") for value in node.value.values]
            return list(dict.fromkeys(paths))
    return []


def folders(tree: str) -> dict[str, int]:
    """Each folder of ``honing/`` (``ls honing/*``) and the Python files below it."""
    root = os.path.join(tree, "honing")
    found = sorted(
        name
        for name in os.listdir(root)
        if os.path.isdir(os.path.join(root, name)) and name.isidentifier() and not name.startswith("__")
    )
    return {name: len(python_files(os.path.join(root, name))) for name in found}


def current(tree: str = REPO) -> dict:
    """The page's numbers for the checkout at ``tree``, read from its source (a few seconds; no repeated pairs)."""
    modules = parsed_modules(tree)
    chains = chain_methods(tree, modules)
    with open(os.path.join(tree, "README.md"), encoding="utf-8") as handle:
        readme = len(handle.read().splitlines())
    # the setting's name anywhere in the text first: tokenizing only those files keeps this fast
    nonfinite = []
    for path in modules:
        with open(path, encoding="utf-8") as handle:
            if "nonfinite_loss" in handle.read() and re.search(r"\bnonfinite_loss\b", code_only(path)):
                nonfinite.append(os.path.relpath(path, tree))
    heavy = {name: count for name, count in chains.items() if count > CHAIN_LIMIT}
    return {
        "recipe chains": {name.rpartition(".")[2]: chains[name] for name in recipe_classes(modules, tree)},
        "trainer chain": chains.get("honing.train.trainer.Trainer"),
        "classes over 30": dict(sorted(heavy.items(), key=lambda item: (-item[1], item[0]))),
        "files naming nonfinite_loss": sorted(nonfinite),
        "bare Any annotations": bare_any_annotations(modules),
        "README lines": readme,
        "folders": folders(tree),
    }


def generated_page(page: str, numbers: dict, duplicates: str) -> str:
    """``page`` with its folder and numbers blocks written from ``numbers`` and the repeated-code row."""
    folders_text = architecture_page.folders_table(numbers["folders"], architecture_page.folder_lines(page))
    page = architecture_page.replace_block(page, architecture_page.FOLDERS, folders_text)
    return architecture_page.replace_block(
        page, architecture_page.NUMBERS, architecture_page.numbers_table(numbers, duplicates)
    )


def write_page(at: str | None) -> int:
    """Rewrite the page's generated blocks, counting the repeated pairs too (minutes): for the working tree, or for
    the commit ``at`` (a clean checkout: others' uncommitted files left out)."""
    with open(PAGE, encoding="utf-8") as handle:
        page = handle.read()
    root = tempfile.mkdtemp(prefix="honing-architecture-") if at else None
    tree = os.path.join(root, "tree") if root else REPO
    if at:
        subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, at], cwd=REPO, check=True)
    try:
        duplicates = architecture_page.duplicates_row(duplicate_pairs(tree), date.today().isoformat())
        written = generated_page(page, current(tree), duplicates)
    finally:
        if at:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=REPO, check=False)
            shutil.rmtree(root, ignore_errors=True)
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(written)
    print(f"{os.path.relpath(PAGE, REPO)}: {'rewritten' if written != page else 'unchanged'}")
    return 0


def main() -> int:
    """Measure both trees and print them side by side, or rewrite the page's numbers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--before", help="the git revision to compare the working tree against")
    action.add_argument("--write", action="store_true", help="rewrite docs/architecture.md's generated blocks")
    parser.add_argument("--at", help="with --write: measure this commit (e.g. HEAD) instead of the working tree")
    args = parser.parse_args()
    if args.write:
        return write_page(args.at)
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
