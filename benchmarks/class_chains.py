"""Methods along each class's chain of honing classes, read from the source (nothing imported, so it takes a second):
for every class defined under ``honing/``, the distinct names of the ``def``s written in its body and in the bodies of
its honing ancestors (bases resolved through the modules' imports and packages' re-exports; outside bases such as
``torch.nn.Module`` or ``BaseModel`` are not counted)."""

from __future__ import annotations

import ast
import os

#: a class: its module-qualified name -> (the qualified names of its bases, as resolved or not, its own method names)
Classes = dict[str, tuple[list[str], set[str]]]


def module_name(tree: str, path: str) -> str:
    """``honing/train/trainer.py`` -> ``honing.train.trainer``; a package's ``__init__.py`` is the package."""
    parts = os.path.relpath(path, tree)[: -len(".py")].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(module: ast.Module, name: str, is_package: bool) -> dict[str, str]:
    """The names a module binds by import -> what they name, qualified (``from .x import Y`` resolved)."""
    package = name if is_package else name.rpartition(".")[0]
    names: dict[str, str] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:  # "import honing.train.trainer" binds "honing"
                    head = alias.name.partition(".")[0]
                    names[head] = head
    return names


def read_classes(tree: str, modules: dict[str, ast.Module]) -> tuple[Classes, dict[str, dict[str, str]]]:
    """Every class of ``modules`` (qualified name -> its bases as written, qualified, and its methods) and each
    module's imports."""
    classes: Classes = {}
    imports: dict[str, dict[str, str]] = {}
    for path, module in modules.items():
        name = module_name(tree, path)
        imports[name] = imported_names(module, name, path.endswith("__init__.py"))
        local = {node.name for node in module.body if isinstance(node, ast.ClassDef)}
        for node in module.body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = []
            for base in node.bases:
                written = ast.unparse(base.value if isinstance(base, ast.Subscript) else base)
                head, _, rest = written.partition(".")
                if head in local and not rest:
                    bases.append(f"{name}.{head}")
                elif head in imports[name]:
                    bases.append(".".join(filter(None, [imports[name][head], rest])))
                else:
                    bases.append(written)
            methods = {item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
            classes[f"{name}.{node.name}"] = (bases, methods)
    return classes, imports


def resolve(name: str, classes: Classes, imports: dict[str, dict[str, str]], depth: int = 0) -> str | None:
    """The class ``name`` is, followed through re-exports (``honing.recipes.Recipe`` -> ``honing.recipes.base.Recipe``);
    None for a name outside honing's classes."""
    if name in classes:
        return name
    module, _, attribute = name.rpartition(".")
    target = imports.get(module, {}).get(attribute)
    if target is None or depth > 8:
        return None
    return resolve(target, classes, imports, depth + 1)


def chain_methods(tree: str, modules: dict[str, ast.Module]) -> dict[str, int]:
    """For each honing class (qualified name), the distinct method names along its chain of honing classes."""
    classes, imports = read_classes(tree, modules)

    def names(cls: str, seen: frozenset[str]) -> set[str]:
        bases, methods = classes[cls]
        found = set(methods)
        for base in bases:
            resolved = resolve(base, classes, imports)
            if resolved is not None and resolved not in seen:
                found |= names(resolved, seen | {resolved})
        return found

    return {cls: len(names(cls, frozenset({cls}))) for cls in classes}
