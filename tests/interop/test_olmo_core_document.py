"""OLMo-core's ``olmo_core.train`` document (``../shared/seeds/002_*``, not part of the repository: skipped where
absent) against ``honing.interop.olmo_core``: every code block of the document runs as written with only the import
root changed (``olmo_core.train`` -> ``honing.interop.olmo_core``) and the names a block leaves to its script given
local stand-ins; every API entry (``olmo_core.train.X(...)[source]``) and method (``name(...)[source]``) exists with
the document's parameters in its order and its defaults, but the ones docs/coming-from.md says differ."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import honing.interop.olmo_core as olmo_core
from honing.data.loader import DataLoader
from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import TokenDataset, tiny_llama

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
PAGE = ROOT / "docs" / "coming-from.md"
# a paragraph that starts a Python statement (the text lost its code markup; a block's indented lines follow it)
STATEMENT = re.compile(r"^(?:if |for |while |def |class |import |from \S+ import |with |try:|[A-Za-z_][\w.]*\s*=[^=])")
ENUM_MEMBER = re.compile(r"^\w+ = '[^']*'$")  # an enum's member entry (``steps = 'steps'``), not code
# (entry, parameter): honing's default differs from the document's, for the reason docs/coming-from.md gives
DIFFERS = {
    ("prepare_training_environment", "backend"): "'auto': nccl where CUDA is, gloo alone where it is not",
    ("TrainerConfig", "cancel_check_interval"): "1: honing's cancel check is asynchronous, so every step costs nothing",
}


def document() -> str:
    """The text of OLMo-core's document."""
    found = sorted(SEEDS.glob("002_*.txt"))
    if not found:
        pytest.skip(f"{SEEDS} holds no 002_* document")
    return found[0].read_text(encoding="utf-8")


def code_blocks(text: str) -> list[str]:
    """The document's code blocks: a paragraph that starts a statement, with the indented paragraphs after it,
    that Python parses (an API entry or an enum member's line is not a block)."""
    paragraphs = re.split(r"\n\s*\n", text)
    blocks, index = [], 0
    while index < len(paragraphs):
        first, end = paragraphs[index], index + 1
        while end < len(paragraphs) and paragraphs[end][:1].isspace():
            end += 1
        block = "\n\n".join(paragraphs[index:end])
        if STATEMENT.match(first) and not ENUM_MEMBER.match(block) and "[source]" not in first and parses(block):
            blocks.append(block)
            index = end
        else:
            index += 1
    return blocks


def parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def with_honings_import_root(block: str) -> str:
    """The block with its import root changed, and nothing else."""
    return block.replace("olmo_core.train", "honing.interop.olmo_core")


def stand_ins(save_folder: str) -> dict:
    """What the document's Overview block leaves to its script ("Build train module and data loader..."): a tiny
    Llama's train module, token rows and a trainer config of 3 steps."""
    model = tiny_llama(seed=0)
    optimizer = build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    return {
        "train_module": LMTrainModule(model, optimizer, micro_batch_size=4),
        "data_loader": DataLoader(TokenDataset(rows=64), global_batch_size=8, seed=0),
        "trainer_config": olmo_core.TrainerConfig(save_folder=save_folder, max_duration=olmo_core.Duration.steps(3)),
    }


def test_every_code_block_runs_as_written(tmp_path):
    blocks = code_blocks(document())
    table = PAGE.read_text(encoding="utf-8").split("### The document's code blocks", 1)[1].split("\n\n")[1]
    assert len(blocks) == len(table.splitlines()) - 2  # the page's table names each block (a header, a rule)
    for block in blocks:
        save_folder = str(tmp_path / "run")
        namespace = {name: getattr(olmo_core, name) for name in olmo_core.__all__}
        namespace.update(stand_ins(save_folder), __name__="__main__")
        exec(compile(with_honings_import_root(block), "olmo_core.train document block", "exec"), namespace)
        trainer = namespace["trainer"]
        assert trainer.global_step == 3 and not trainer.is_canceled  # fit() trained the config's duration
        assert olmo_core.Checkpointer.latest_checkpoint(save_folder).endswith("step3")  # and saved its end


def parameters(arguments: str) -> dict[str, str | None]:
    """A documented signature's parameters (``*`` and private ones left out) and their defaults as written."""
    parts, depth, quote, current = [], 0, "", ""
    for char in arguments:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    found = {}
    for part in (part.strip() for part in [*parts, current] if part.strip()):
        name, _, default = part.partition("=")
        name = name.strip().lstrip("*")
        if name and not name.startswith("_") and name != "self":
            found[name] = default or None
    return found


def documented_entries(text: str):
    """(owner or None, name, parameters) of every ``[source]`` entry, methods under the class above them."""
    owner = None
    for line in (line.strip() for line in text.splitlines()):
        if match := re.match(r"^(class\s+)?olmo_core\.train\.(\w+)\((.*)\)\[source\]$", line):
            owner = match.group(2) if match.group(1) else None
            yield None, match.group(2), parameters(match.group(3))
        elif (match := re.match(r"^(?:classmethod\s+)?(\w+)\((.*)\)\[source\]$", line)) and owner:
            yield owner, match.group(1), parameters(match.group(2))


def test_every_entry_has_the_documents_parameters_in_its_order_and_its_defaults():
    checked = set()
    for owner, name, documented in documented_entries(document()):
        target = getattr(getattr(olmo_core, owner), name) if owner else getattr(olmo_core, name)
        if isinstance(target, type) and list(documented) == ["value"]:
            continue  # an enum: its members are checked by name on the page (test_coming_from_names.py)
        honing = {
            key: parameter
            for key, parameter in inspect.signature(target).parameters.items()
            if key not in ("self", "cls") and not key.startswith("_")
        }
        where = f"{owner + '.' if owner else ''}{name}"
        assert list(honing)[: len(documented)] == list(documented), where
        for extra in list(honing)[len(documented) :]:  # honing's own additions come last and are optional
            assert honing[extra].default is not inspect.Parameter.empty or honing[extra].kind.name.startswith("VAR")
        for key, default in documented.items():
            if default is None or (name, key) in DIFFERS or not parses(default) or "<factory>" in default:
                continue
            try:
                expected = ast.literal_eval(default)
            except ValueError:
                continue  # datetime.timedelta(...): not a literal
            assert honing[key].default == expected, f"{where}({key}=...)"
        checked.add(where)
    # the extraction reads the API reference: its classes, functions and methods
    assert {"Trainer", "TrainerConfig", "Checkpointer", "Trainer.load_checkpoint", "Checkpointer.load"} <= checked
    assert {"prepare_training_environment", "Duration.chinchilla_tokens", "Trainer.run_bookkeeping_op"} <= checked
