"""Every name the four documents give (``../shared/seeds``, not part of the repository: skipped where absent) stands on
docs/coming-from.md, in that document's section (issue 35: the page lists every name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
PAGE = ROOT / "docs" / "coming-from.md"
PROSE = {"Parameters", "Returns", "Return", "Raises", "Bases", "Tip", "Note", "Warning", "Example", "Type", "is"}
# olmOCR's document lost its list markup: each key's description runs into the next key ("LoRA alpha scalingdropout:
# LoRA dropout rate"); these are the descriptions' last words, cut off the key they run into
OLMOCR_DESCRIPTION_ENDS = ("identifier", "scaling", "rate", "strategy", "paths", "reproducibility", "sources", "size",
                           "accumulation", "steps", "ratio", "decay", "clipping", "checkpointing", "name", "frequency",
                           "team", "key")  # fmt: skip
# ... and its code spans run into the prose after them ("pixel_valuesandimage_grid_thwin batches")
OLMOCR_GLUE = re.compile(r"(?<=[a-z0-9])(?:in|for|to|with|as)(?=\s)|and(?=[a-z]+_)")


def seed(prefix: str) -> str:
    """The text of the document whose file name starts with ``prefix``."""
    found = sorted(SEEDS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"{SEEDS} holds no {prefix}_* document")
    return found[0].read_text(encoding="utf-8")


def olmo_core_names(text: str) -> set[str]:
    """The API reference's names: ``olmo_core.train.X(...)`` entries, methods (``name(...)[source]``), fields and
    properties (``name: type``)."""
    names = set()
    for line in (line.strip() for line in text.splitlines()):
        if match := re.match(r"^(?:class\s+)?olmo_core\.train\.([\w.]+)", line):
            names.add(match.group(1).split(".")[-1])
        elif match := re.match(r"^([a-z_]\w*)\(.*\)\[source\]$", line):
            names.add(match.group(1))
        elif (match := re.match(r"^(?:property\s+)?([a-z_]\w*)\s*:\s*\S", line)) and match.group(1) not in PROSE:
            names.add(match.group(1))
    return names


def veomni_names(text: str) -> set[str]:
    """The names the VeOmni document's code uses: ``self.<attribute path>`` (its first and last parts), defined
    methods and classes, and the callback events."""
    names = set()
    for match in re.finditer(
        r"self\.([a-z_]+(?:\.[a-z_]+)*)|def ([a-z_]\w*)|class ([A-Za-z_]\w*)|\b(on_[a-z_]+)", text
    ):
        parts = next(group for group in match.groups() if group).split(".")
        names.update({parts[0], parts[-1]})  # self.args.train.freeze_vit: args and freeze_vit
    return names - PROSE


def olmocr_key(glued: str) -> str:
    """A key of olmOCR's configuration lists, the previous description's last word cut off its front."""
    for end in OLMOCR_DESCRIPTION_ENDS:
        if glued.startswith(end) and len(glued) > len(end):
            return glued[len(end) :]
    return glued


def olmocr_names(text: str) -> set[str]:
    """The names olmOCR's training API document gives: its functions and methods (a line each), its classes, the
    ``TrainConfig`` keys of its configuration lists (``key: description``), the code spans of its advice (keys,
    batch keys, module names, ``config.yaml``)."""
    names = set()
    for line in text.splitlines():
        if re.fullmatch(r"[a-z_]\w*", line):  # run_train, get_rank, update_wandb_config, on_save
            names.add(line)
            continue
        # CheckpointUploadCallback, transformers.TrainerCallback, "TheTrainConfig dataclass" (a lost space)
        names.update(re.findall(r"(?:The|^|Inherits:[\w.]*\.)([A-Z][a-z]+(?:[A-Z][a-z]+)+)\b", line))
        if re.match(r"[a-z_]+: \S", line):  # a configuration list: key: description<key>: description ...
            first, *rest = line.split(": ")
            names.add(first)
            names.update(olmocr_key(re.search(r"[a-z][a-z0-9_]*$", segment).group(0)) for segment in rest[:-1])
            continue
        names.update(re.findall(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", OLMOCR_GLUE.sub(" ", line)))
        names.update(re.findall(r'"(\w+)"', line))  # ["q_proj", "v_proj", ...]
        names.update(re.findall(r"\w+\.yaml", line))
    return names - {"HuggingFace"}  # a company's name


def oumi_names(text: str) -> set[str]:
    """The names Oumi's training-methods document gives: its YAML keys and the names its YAML values give (dataset,
    collator, template, reward and layer names), its rows' JSON keys, its Python classes, keywords and enum members,
    its trainer types, its classes in prose (``BasePretrainingDataset``) and its dotted config paths (the verl
    table's, ``training.verl_config_overrides``)."""
    names = set()
    for line in text.splitlines():
        if match := re.match(r"(?:- )?([a-z_]\w*):(?:\s|$)", line):  # YAML (the text lost its indentation)
            names.add(match.group(1))
            names.update(re.findall(r'^[^#]*?:\s*\[?"([a-z][\w-]*)"', line))  # "text_sft", ["vision_encoder"]
        names.update(re.findall(r'"(\w+)":', line))  # JSON row keys
        names.update(re.findall(r"\b([a-z_]+)=", line))  # keyword arguments
        if match := re.match(r"from [\w.]+ import (.*)", line):
            names.update(re.split(r",\s*", match.group(1)))
        names.update(re.findall(r"\b(?:Role|Type)\.([A-Z_]+)", line))
        names.update(re.findall(r"\b(?:TRL|VERL)_[A-Z]+\b|(?<=\")OUMI(?=\")", line))
        names.update(re.findall(r"\b([A-Z][a-z]+(?:[A-Z][a-z]+)+)\b", line))
        unquoted = re.sub(r'"[^"]*"', "", line)  # no file names or URLs from the rows' values
        for path in re.findall(r"\b[a-z][a-z_]*(?:\.[a-z_]+)+\b", unquoted):
            if "_" in path or re.fullmatch(r"[a-z_./]+", line):  # not prose ("e.g."); the verl table's lines
                names.add(path)
    return names - {"HuggingFace"}  # a company's name


def section(heading: str) -> str:
    """The page's text under the ``## `` heading that starts with ``heading``, up to the next one."""
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(f"## {heading}")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else None]


def missing(names: set[str], text: str) -> list[str]:
    """The names (a dotted path: its last part) that ``text`` never writes as a word."""
    return sorted(name for name in names if not re.search(rf"\b{re.escape(name.split('.')[-1])}\b", text))


def test_every_olmo_core_name_is_on_the_page():
    names = olmo_core_names(seed("002"))
    assert len(names) > 60  # the extraction reads the API reference
    assert missing(names, section("OLMo-core")) == []


def test_every_veomni_name_is_on_the_page():
    names = veomni_names(seed("001"))
    assert {"BaseTrainer", "forward_backward_step", "on_step_begin", "freeze_vit"} <= names
    assert missing(names, section("VeOmni")) == []


def test_every_olmocr_name_is_on_the_page():
    names = olmocr_names(seed("000"))
    # the extraction reads the API entries, the configuration lists (their glued keys cut apart) and the advice
    assert {
        "run_train",
        "CheckpointUploadCallback",
        "TrainConfig",
        "use_flash_attn",
        "dropout",
        "bias",
        "seed",
        "cache_location",
        "secret_access_key",
        "image_grid_thw",
        "image_masks",
        "q_proj",
        "config.yaml",
    } <= names
    assert missing(names, section("olmOCR")) == []


def test_every_oumi_name_is_on_the_page():
    names = oumi_names(seed("003"))
    assert {
        "TRL_SFT",
        "OUMI",
        "ContentItem",
        "IMAGE_URL",
        "collator_kwargs",
        "vision_encoder",
        "letter_count",
        "BaseExperimentalGrpoDataset",
        "actor_rollout_ref.model.path",
        "training.verl_config_overrides",
    } <= names
    assert len(names) > 100
    assert missing(names, section("Oumi")) == []
