"""Writes the key tables of axolotl's (``src/axolotl/utils/schemas``, its nested dataset and TRL models and two
plugins) and LLaMA-Factory's config schemas (``src/llamafactory/hparams``, ``data/parser.py``'s ``dataset_info.json``)
as package data (``honing/interop/configs/schema_keys/axolotl.json``, ``llamafactory.json``, read by
``key_tables.key_table``): every key's name, type and default, read from the projects' own sources at one commit.

The sources are read, never imported (neither project is installed here): axolotl's pydantic models and
LLaMA-Factory's dataclasses are parsed with ``ast``, a class's fields merged with those of its bases in the schema
files. LLaMA-Factory's ``TrainingArguments`` extends transformers' ``Seq2SeqTrainingArguments``, whose fields are
read the same way from the newest transformers wheel LLaMA-Factory allows (its pyproject pins
``transformers<=5.8.0``; ``pip download transformers==5.8.0 --no-deps``).

    python tests/interop/configs/schema_keys_from_sources.py AXOLOTL_GIT_DIR LLAMAFACTORY_GIT_DIR TRANSFORMERS_WHEEL

(each project a clone or bare git directory; its ``HEAD`` is read). The translation tables
(``axolotl_table.py``, ``llamafactory_table.py``) must then name every key; ``test_foreign_schema_walk.py`` checks.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from honing.interop.configs.key_tables import FOLDER, KeyTable, table_json

OUT = Path(__file__).resolve().parents[3] / "honing" / "interop" / "configs" / FOLDER
AXOLOTL_SCHEMAS = "src/axolotl/utils/schemas"
LLAMAFACTORY_HPARAMS = "src/llamafactory/hparams"
# LLaMA-Factory's training arguments: its parser reads these five dataclasses from one flat YAML (parser._TRAIN_ARGS)
LLAMAFACTORY_TRAIN = {
    "model_args.py": "ModelArguments",
    "data_args.py": "DataArguments",
    "training_args.py": "TrainingArguments",
    "finetuning_args.py": "FinetuningArguments",
    "generating_args.py": "GeneratingArguments",
}
# axolotl's sections that are lists of models (each item's keys walked) or one nested model
AXOLOTL_NESTED = {
    "datasets[]": ("datasets.py", ["SFTDataset", "DPODataset", "KTODataset", "StepwiseSupervisedDataset"]),
    "pretraining_dataset[]": ("datasets.py", ["PretrainingDataset"]),
    "trl": ("trl.py", ["TRLConfig"]),
}
# the plugins axolotl's own examples turn on most (``plugins:``), whose keys sit at the config's top level
AXOLOTL_PLUGINS = {"liger/args.py": "LigerArgs", "cut_cross_entropy/args.py": "CutCrossEntropyArgs"}


def git_show(repo: str, path: str) -> str:
    """A file of ``repo``'s HEAD."""
    return subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
    ).stdout


def head(repo: str) -> str:
    """``repo``'s HEAD commit."""
    return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout


def classes(source: str) -> dict[str, ast.ClassDef]:
    """The module's top-level classes by name."""
    return {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}


def default_text(value: ast.expr | None) -> str:
    """A field's default as source text: ``Field(default=...)`` / ``field(default=...)`` unwrapped; ``REQUIRED``
    for a field with none; a factory as ``factory()``."""
    if value is None:
        return "REQUIRED"
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("Field", "field"):
        for keyword in value.keywords:
            if keyword.arg == "default":
                return ast.unparse(keyword.value)
            if keyword.arg == "default_factory":
                factory = keyword.value
                if isinstance(factory, ast.Lambda):
                    return ast.unparse(factory.body)
                return f"{ast.unparse(factory)}()"
        return ast.unparse(value.args[0]) if value.args else "REQUIRED"
    return ast.unparse(value)


def alias(value: ast.expr | None) -> str | None:
    """The ``alias=`` a pydantic field is written as in YAML, if any."""
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "alias" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return None


def in_init(value: ast.expr | None) -> bool:
    """False for a dataclass field declared ``field(init=False)`` (computed, not a config key)."""
    if isinstance(value, ast.Call):
        for keyword in value.keywords:
            if keyword.arg == "init" and isinstance(keyword.value, ast.Constant) and keyword.value.value is False:
                return False
    return True


def fields(name: str, known: dict[str, ast.ClassDef]) -> dict[str, tuple[str, str]]:
    """The YAML keys of class ``name`` (its bases' first, as pydantic and dataclasses order them): key ->
    (type, default)."""
    node = known[name]
    found: dict[str, tuple[str, str]] = {}
    for base in reversed(node.bases):  # the last base's fields come first, as a dataclass's MRO gives them
        base_name = ast.unparse(base)
        if base_name in known:
            found.update(fields(base_name, known))
    for statement in node.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        key = statement.target.id
        kind = ast.unparse(statement.annotation)
        if key == "model_config" or kind.startswith("ClassVar") or not in_init(statement.value):
            continue
        found[alias(statement.value) or key] = (kind, default_text(statement.value))
    return found


def axolotl(repo: str) -> dict[str, dict[str, tuple[str, str]]]:
    """axolotl's keys: the top level (``AxolotlInputConfig`` and every model it is built from) and the nested
    sections of ``AXOLOTL_NESTED``."""
    listing = subprocess.run(
        ["git", "-C", repo, "ls-tree", "--name-only", "HEAD", f"{AXOLOTL_SCHEMAS}/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    known: dict[str, ast.ClassDef] = {}
    for path in listing:
        if path.endswith(".py"):
            known.update(classes(git_show(repo, path)))
    groups = {"": fields("AxolotlInputConfig", known)}
    for group, (_, names) in AXOLOTL_NESTED.items():
        merged: dict[str, tuple[str, str]] = {}
        for name in names:
            for key, value in fields(name, known).items():
                merged.setdefault(key, value)
        groups[group] = merged
    plugins: dict[str, tuple[str, str]] = {}
    for path, name in AXOLOTL_PLUGINS.items():
        plugins.update(fields(name, classes(git_show(repo, f"src/axolotl/integrations/{path}"))))
    groups["plugins"] = plugins
    return groups


def llamafactory(repo: str, wheel: str) -> dict[str, dict[str, tuple[str, str]]]:
    """LLaMA-Factory's training keys (five dataclasses, one flat namespace; transformers' ``Seq2SeqTrainingArguments``
    under its own), and ``dataset_info.json``'s entry keys, ``columns`` and ``tags``."""
    groups: dict[str, dict[str, tuple[str, str]]] = {}
    for file, name in LLAMAFACTORY_TRAIN.items():
        groups[name] = fields(name, classes(git_show(repo, f"{LLAMAFACTORY_HPARAMS}/{file}")))
    with zipfile.ZipFile(wheel) as archive:
        known = {}
        for path in ("transformers/training_args.py", "transformers/training_args_seq2seq.py"):
            known.update(classes(archive.read(path).decode("utf-8")))
    hf = fields("Seq2SeqTrainingArguments", known)
    groups["Seq2SeqTrainingArguments"] = {
        key: value for key, value in hf.items() if key not in groups["TrainingArguments"]
    }
    attr = fields("DatasetAttr", classes(git_show(repo, "src/llamafactory/data/parser.py")))
    parser = git_show(repo, "src/llamafactory/data/parser.py")
    # the entry's location keys are read by name in get_dataset_list; the rest by DatasetAttr.join
    locations = ["hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name", "file_name"]
    assert all(f'"{key}"' in parser for key in locations), "get_dataset_list reads other location keys now"
    columns = ["prompt", "query", "response", "history", "messages", "system", "tools"]
    columns += ["images", "videos", "audios", "chosen", "rejected", "kto_tag"]
    tags = ["role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag"]
    joined = ["formatting", "ranking", "subset", "split", "folder", "num_samples"]
    groups["dataset_info"] = {key: ("str", "None") for key in locations}
    groups["dataset_info"].update({key: attr[key] for key in joined})
    groups["dataset_info"].update(columns=("dict", "{}"), tags=("dict", "{}"))
    groups["dataset_info.columns"] = {key: attr[key] for key in columns}
    groups["dataset_info.tags"] = {key: attr[key] for key in tags}
    return groups


def write(system: str, source: str, groups: dict[str, dict[str, tuple[str, str]]]) -> None:
    """``system``'s table (``schema_keys/<system>.json``): ``source`` and every group's keys."""
    (OUT / f"{system}.json").write_text(table_json(KeyTable(source, groups)))


def main(axolotl_repo: str, llamafactory_repo: str, transformers_wheel: str) -> None:
    """Write both tables."""
    write("axolotl", f"axolotl-ai-cloud/axolotl@{head(axolotl_repo).strip()}", axolotl(axolotl_repo))
    write(
        "llamafactory",
        f"hiyouga/LLaMA-Factory@{head(llamafactory_repo).strip()}; {Path(transformers_wheel).name}",
        llamafactory(llamafactory_repo, transformers_wheel),
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
