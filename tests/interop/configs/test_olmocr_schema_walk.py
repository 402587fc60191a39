"""olmOCR's current training config walked key by key (``schema_keys/olmocr.json``, generated from
``olmocr/train/config.py``): every key, and every pipeline step's, has a row in ``olmocr_table`` and no row names
another key; each honoured key, set alone to a value other than its default, becomes the honing key its row names with
the value it means (a step's ``enabled: false`` translates as the pipeline without the step); each refused key set is
refused in one line naming it; each moot key set is noted, never refused."""

from __future__ import annotations

import copy

import pytest

from honing.interop.configs import olmocr_table, translate
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.schema_table import counts, schema_default

KEYS = key_table("olmocr").keys

PIPELINE = [
    {"name": "FrontMatterParser"},
    {"name": "PDFRenderer"},
    {"name": "StaticLengthDocumentAnchoring"},
    {"name": "NewYamlFinetuningPromptWithAnchoring"},
    {"name": "FrontMatterOutputFormat"},
    {"name": "InstructUserMessages"},
    {"name": "Tokenizer"},
]
BASE = {
    "run_name": "run",
    "model": {"name": "m/vl", "use_lora": True},
    "dataset": {"train": [{"root_dir": "/data/a", "pipeline": PIPELINE}]},
    "training": {"output_dir": "/out"},
}
TRAIN = "dataset.train[0]"
# what each step sets when it is in the pipeline (a step that sets no key of its own: {})
STEP_SETS = {
    "FrontMatterParser": {}, "Tokenizer": {}, "PDFRenderer": {"data.pdf_longest_side": 1024},
    "StaticLengthDocumentAnchoring": {"data.pdf_pages.anchor_text_len": 6000},
    "FinetuningPrompt": {"data.pdf_pages.prompt": "plain"},
    "NewYamlFinetuningPromptWithAnchoring": {"data.pdf_pages.prompt": "front_matter"},
    "NewYamlFinetuningPromptWithNoAnchoring": {"data.pdf_pages.prompt": "front_matter",
                                               "data.pdf_pages.anchor_text_len": None},
    "FrontMatterOutputFormat": {"data.pdf_pages.reply": "front_matter"},
    "JSONOutputFormat": {"data.pdf_pages.reply": "json"},
    "InstructUserMessages": {"data.pdf_pages.prompt_first": False},
    "LatexBracketNormalizer": {"data.pdf_pages.latex_brackets": True},
    "ReformatLatexBoldItalic": {"data.pdf_pages.latex_bold_italic": True},
    "TableTransformation": {"data.pdf_pages.tables": "annotate_dims"},
    "RandomTokenFlipper": {"data.pdf_pages.token_flip_rate": 1e-4},
    "FilterOutRotatedDocuments": {"data.pdf_pages.skip_rotated": True},
    "DatasetTextRuleFilter": {"data.pdf_pages.text_rules": True},
    "RotationAugmentation": {"data.pdf_pages.rotation_probability": 0.5},
    "AugraphyBasicAugmentations": {"data.image_transforms.probability": 0.5,
                                   "data.image_transforms.rotation_degrees": 3.0},
}  # fmt: skip
ROTATE = [*PIPELINE, {"name": "RotationAugmentation", "probability": 0.2}]
# honoured keys whose translation is not "the row's honing key = the value": "group:key" -> (value, {key: value})
SPECIAL = {
    ":model": ({"name": "x/vl"}, {"model.name_or_path": "x/vl"}),
    ":dataset": (
        {"train": [{"root_dir": "/d", "pipeline": PIPELINE}]},
        {"data.train.sources": [{"path": "/d", "format": "olmocr_pages"}]},
    ),  # fmt: skip
    ":training": ({"learning_rate": 0.001}, {"optim.lr": 0.001}),
    ":run_name": ("r2", {"run_name": "r2", "trainer.save_folder": "/out/r2"}),
    "model:load_in_8bit": (True, {"model.quantize": "int8"}),
    "model:load_in_4bit": (True, {"model.quantize": "nf4"}),
    "model:torch_dtype": ("bfloat16", {"trainer.precision": "bf16"}),
    "model:use_flash_attention": (
        {"use_flash_attention": False, "attn_implementation": "eager"},
        {"model.attn_implementation": None},
    ),  # fmt: skip
    "model:attn_implementation": ("eager", {"model.attn_implementation": "eager"}),
    "model:use_lora": (False, {"model.lora": None}),
    "model:lora_alpha": (16, {"model.lora.alpha": 16.0}),
    "dataset:train": (
        [{"root_dir": "/d", "pipeline": PIPELINE}],
        {"data.train.sources": [{"path": "/d", "format": "olmocr_pages"}]},
    ),  # fmt: skip
    "dataset:eval": (
        [{"name": "held", "root_dir": "/e", "pipeline": PIPELINE}],
        {"data.validation.sources": [{"path": "/e", "format": "olmocr_pages", "name": "held"}]},
    ),
    "dataset.<split>[]:root_dir": ("/d", {"data.train.sources": [{"path": "/d", "format": "olmocr_pages"}]}),
    "dataset.<split>[]:pipeline": (ROTATE, {"data.pdf_pages.rotation_probability": 0.2}),
    "dataset.<split>[]:max_samples": (
        5,
        {"data.train.sources": [{"path": "/data/a", "format": "olmocr_pages", "max_samples": 5}]},
    ),  # fmt: skip
    "training:output_dir": ("/o", {"trainer.save_folder": "/o/run"}),
    "training:num_train_epochs": (2, {"trainer.max_duration": "2epochs"}),
    "training:per_device_train_batch_size": (3, {"data.micro_batch_size": 3, "data.batch_size_per_rank": 24}),
    "training:gradient_accumulation_steps": (3, {"data.batch_size_per_rank": 3}),
    "training:lr_scheduler_type": ("linear", {"scheduler.name": "linear"}),
    "training:lr_scheduler_kwargs": ({"num_cycles": 0.25}, {"scheduler.kwargs.num_cycles": 0.25}),
    "training:optim": ("muon", {"optim.name": "muon", "optim.muon_adjust_lr": "original", "optim.momentum": 0.95}),
    "training:muon_momentum": ({"optim": "muon", "muon_momentum": 0.9}, {"optim.momentum": 0.9}),
    **{
        f"training:muon_lr_multiplier_{name}": (
            {"optim": "muon", f"muon_lr_multiplier_{name}": 3.0},
            {f"optim.muon_lr_multiplier_{name}": 3.0},
        )
        for name in ("head", "embed", "scalar")
    },
    "training:adam_beta1": (0.8, {"optim.betas": [0.8, 0.999]}),
    "training:adam_beta2": (0.95, {"optim.betas": [0.9, 0.95]}),
    "training:gradient_checkpointing": (True, {"parallel.activation_checkpointing": "full"}),
    "training:evaluation_strategy": (
        {"evaluation_strategy": "steps", "eval_steps": 9},
        {"callbacks.evaluator.interval": 9},
    ),  # fmt: skip
    "training:save_strategy": (
        {"save_strategy": "steps", "save_steps": 9},
        {"callbacks.checkpointer.save_interval": 9},
    ),  # fmt: skip
    "training:report_to": (
        ["wandb", "tensorboard"],
        {"callbacks.tensorboard.enabled": True, "callbacks.wandb.enabled": True},
    ),
    "pipeline[TableTransformation]:transformation": ("firstrowpreview", {"data.pdf_pages.tables": "firstrowpreview"}),
}
# values that ask for something of a refused or moot key where the type's sample would not
VALUES: dict[str, dict] = {}


def sample(kind: str, default: str):
    """A value of a key's type that asks for something (not its default)."""
    value = schema_default(default)
    if "bool" in kind:
        return not value if isinstance(value, bool) else True
    if kind.startswith("int") or kind == "Optional[int]":
        return 3 if value != 3 else 4
    if kind.startswith("float"):
        return 0.25
    if kind.startswith("List") or kind.startswith("Optional[List"):
        return ["q_proj"]
    if kind.startswith("Dict"):
        return {"made_up": 1}
    return "sample"


def step_name(group: str) -> str | None:
    """The pipeline step of a ``pipeline[<step>]`` group."""
    return group[len("pipeline[") : -1] if group.startswith("pipeline[") else None


def translated(group: str, key: str, value, *, drop_step: bool = False):
    """The translation of ``BASE`` with ``key`` of ``group`` set to ``value`` (a mapping naming ``key``: its keys),
    and the key's path in messages (a step's: the step's)."""
    raw = copy.deepcopy(BASE)
    values = value if isinstance(value, dict) and key in value else {key: value}
    step = step_name(group)
    if step is not None:
        pipeline = raw["dataset"]["train"][0]["pipeline"]
        found = [index for index, item in enumerate(pipeline) if item["name"] == step]
        if drop_step:
            pipeline[:] = [item for item in pipeline if item["name"] != step]
            return translate(raw), None
        if not found:
            pipeline.append({"name": step})
            found = [len(pipeline) - 1]
        pipeline[found[0]].update(values if key != "name" else {})
        return translate(raw), f"{TRAIN}.pipeline[{found[0]}]"
    node = {"": raw, "dataset.<split>[]": raw["dataset"]["train"][0]}.get(group)
    node = raw.setdefault(group, {}) if node is None else node
    node.update(values)
    prefix = {"": "", "dataset.<split>[]": TRAIN}.get(group, group)
    return translate(raw), f"{prefix}.{key}" if prefix else key


def cases(verdict: str) -> list[tuple[str, str]]:
    """(group, key) of every row with ``verdict``."""
    return [(g, k) for g, rows in olmocr_table.TABLE.items() for k, (v, _) in rows.items() if v == verdict]


def ids(found: list[tuple[str, str]]) -> list[str]:
    """Test ids: group:key."""
    return [f"{group}:{key}" for group, key in found]


@pytest.mark.parametrize("group", list(KEYS))
def test_every_key_of_the_schema_has_a_verdict(group):
    keys, rows = set(KEYS[group]), set(olmocr_table.TABLE[group])
    assert sorted(keys - rows) == [], f"{group}: keys of olmOCR's dataclass without a verdict"
    assert sorted(rows - keys) == [], f"{group}: verdicts for keys the dataclass does not have"
    assert set(olmocr_table.TABLE) == set(KEYS)


@pytest.mark.parametrize(("group", "key"), cases("honoured"), ids=ids(cases("honoured")))
def test_each_honoured_key_reaches_its_honing_key(group, key):
    step = step_name(group)
    if key == "enabled" and step:  # false: as if the step were not in the pipeline
        off, _ = translated(group, key, False)
        without, _ = translated(group, key, None, drop_step=True)
        assert (off.config, len(off.refused)) == (without.config, len(without.refused))
        return
    if key == "name" and step:
        value, expect = step, STEP_SETS[step]
    elif f"{group}:{key}" in SPECIAL:
        value, expect = SPECIAL[f"{group}:{key}"]
    else:
        value = sample(*KEYS[group][key])
        expect = {olmocr_table.TABLE[group][key][1].split(" ")[0]: value}
    translation, _ = translated(group, key, value)
    assert translation.refused == [], translation.refused
    for honing_key, expected in expect.items():
        assert translation.get(honing_key) == expected, (honing_key, translation.config)


@pytest.mark.parametrize(("group", "key"), cases("refused"), ids=ids(cases("refused")))
def test_each_refused_key_set_is_refused_in_one_line_naming_it(group, key):
    value = VALUES.get(f"{group}:{key}", sample(*KEYS[group][key]))
    translation, path = translated(group, key, value)
    step = step_name(group)
    naming = [line for line in translation.refused if line.startswith(path) and (key in line or step in line)]
    assert len(naming) == 1 and "\n" not in naming[0], translation.refused


@pytest.mark.parametrize(("group", "key"), cases("moot"), ids=ids(cases("moot")))
def test_each_moot_key_set_is_noted_not_refused(group, key):
    translation, path = translated(group, key, sample(*KEYS[group][key]))
    assert translation.refused == [], translation.refused
    assert any(note.startswith(path) for note in translation.notes), translation.notes


def test_the_counts(capsys):
    lines = []
    for group, rows in olmocr_table.TABLE.items():
        found = counts(rows)
        lines.append(f"olmOCR {group or 'Config'}: {len(rows)} keys, {found['honoured']} honoured, "
                     f"{found['moot']} moot, {found['refused']} refused")  # fmt: skip
    with capsys.disabled():
        print("\n" + "\n".join(lines))
