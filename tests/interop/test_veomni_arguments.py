"""VeOmni's "extending the arguments": a recipe's own config section (a dataclass as the document writes it, or a
pydantic model) is accepted, validated and typo-checked like honing's sections, and ``self.args`` reads VeOmni's
``args.model`` / ``args.data`` / ``args.train`` over the run config."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pytest
from pydantic import BaseModel

from honing.config import ConfigError, load_config, to_yaml, validate
from honing.interop.veomni import BaseTrainer, TrainingArguments, VeOmniArguments, parse_args
from honing.interop.veomni_arguments import ArgumentsView, sections_of
from honing.recipes.pretrain import PretrainRecipe

RAW = {"data": {"train": {"sources": [{"path": "x"}]}}, "model": {"config": {}}}


@dataclass
class VisionArguments:
    vit_lr: float = field(default=1e-5, metadata={"help": "The vision tower's LR"})


@dataclass
class MyTrainingArguments(TrainingArguments):
    freeze_vit: bool = field(default=False, metadata={"help": "Freeze ViT"})
    vision: VisionArguments = field(default_factory=VisionArguments)


@dataclass
class Arguments(VeOmniArguments):
    train: MyTrainingArguments = field(default_factory=MyTrainingArguments)


class Probe(BaseModel):
    """A pydantic section that does not forbid unknown keys itself: honing's loading still does."""

    depth: int = 2


class ExtendedTrainer(BaseTrainer, PretrainRecipe):
    arguments = Arguments


class ProbeRecipe(PretrainRecipe):
    config_sections = {"probe": Probe}


def test_an_extended_arguments_section_is_accepted_validated_and_typo_checked():
    sections = sections_of(Arguments)
    assert sections == {"train": MyTrainingArguments}
    config = validate({**RAW, "train": {"freeze_vit": True, "vision": {"vit_lr": 0.5}}}, sections=sections)
    assert config.train.freeze_vit is True and config.train.vision.vit_lr == 0.5
    assert validate(RAW, sections=sections).train.freeze_vit is False  # the dataclass's defaults
    assert "freeze_vit: true" in to_yaml(config)  # saved with the run like honing's keys
    refused = {
        "train.freeze_vti: unknown key; did you mean train.freeze_vit?": {"freeze_vti": True},
        "train.freeze_vit: Input should be a valid boolean": {"freeze_vit": "maybe"},
        "train.vision.vitlr: unknown key; did you mean train.vision.vit_lr?": {"vision": {"vitlr": 1}},
    }
    for message, train in refused.items():
        with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
            validate({**RAW, "train": train}, sections=sections)
    # other unknown keys are still refused, and honing's sections keep their names
    with pytest.raises(ConfigError, match=r"trian: unknown key; did you mean train\?"):
        validate({**RAW, "trian": {}}, sections=sections)
    with pytest.raises(ConfigError, match=r"train: unknown key; did you mean trainer\?"):
        validate({**RAW, "train": {}})
    with pytest.raises(ConfigError, match=r"model: a recipe's own config section cannot take the name of honing's"):
        validate(RAW, sections={"model": MyTrainingArguments})


def test_a_recipe_named_by_the_config_brings_its_sections(tmp_path):
    recipe = f"{__name__}:ExtendedTrainer"
    assert ExtendedTrainer.config_sections == {"train": MyTrainingArguments}
    config = validate({**RAW, "recipe": recipe, "train": {"freeze_vit": True}})
    assert config.method == "pretrain" and config.train.freeze_vit is True
    with pytest.raises(ConfigError, match=r"train.freeze_vti: unknown key"):
        validate({**RAW, "method": recipe, "train": {"freeze_vti": True}})
    # a pydantic section: unknown keys refused even where the model itself would ignore them
    probe = validate({**RAW, "recipe": f"{__name__}:ProbeRecipe", "probe": {"depth": 3}})
    assert probe.probe.depth == 3
    with pytest.raises(ConfigError, match=r"probe.deph: unknown key; did you mean probe.depth\?"):
        validate({**RAW, "recipe": f"{__name__}:ProbeRecipe", "probe": {"deph": 3}})
    # VeOmni's parse_args: CONFIG.yaml and key=value overrides, the sections of the Arguments given
    path = tmp_path / "run.yaml"
    path.write_text("data: {train: {sources: [{path: x}]}}\nmodel: {config: {}}\ntrain: {freeze_vit: true}\n")
    args = parse_args(Arguments, [str(path), "train.vision.vit_lr=0.25"])
    assert args.train.freeze_vit is True and args.train.vision.vit_lr == 0.25
    assert load_config(str(path), sections={"train": MyTrainingArguments}).train.freeze_vit is True
    with pytest.raises(ConfigError, match="usage: SCRIPT CONFIG.yaml"):
        parse_args(Arguments, [])


def test_self_args_reads_veomnis_model_data_and_train_over_honings_sections():
    raw = {
        **RAW,
        "model": {"name_or_path": "some/model"},
        "train": {"freeze_vit": True},
        "trainer": {"seed": 7, "save_folder": "runs/x"},
        "optim": {"lr": 0.02, "grad_clip": 0.5},
        "data": {**RAW["data"], "seq_len": 64, "global_batch_size": 4, "micro_batch_size": 2},
    }
    config = validate(raw, sections=sections_of(Arguments))
    args = ArgumentsView(config, sections_of(Arguments))
    assert args.train.freeze_vit is True and args.train.vision.vit_lr == 1e-5  # the recipe's own section first
    assert (args.train.seed, args.train.output_dir) == (7, "runs/x")  # then honing's trainer section
    assert (args.train.optimizer.lr, args.train.optimizer.max_grad_norm, args.train.optimizer.type) == (
        0.02,
        0.5,
        "adamw",
    )
    assert (args.train.global_batch_size, args.train.micro_batch_size) == (4, 2)
    assert (args.model.model_path, args.model.tokenizer_path, args.data.seq_len) == ("some/model", "some/model", 64)
    assert args.scheduler is config.scheduler and args.parallel is config.parallel  # any other section by its name
    with pytest.raises(AttributeError, match=r"args.train.freez_vit: no such key"):
        _ = args.train.freez_vit
    # a config validated without the section: the Arguments' defaults
    assert ArgumentsView(validate(RAW), sections_of(Arguments)).train.freeze_vit is False


def test_a_recipe_module_in_the_current_folder_is_found_as_python_m_finds_it(tmp_path, monkeypatch):
    (tmp_path / "my_veomni_trainers.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from honing.recipes.pretrain import PretrainRecipe\n\n\n"
        "@dataclass\nclass Train:\n    freeze_vit: bool = False\n\n\n"
        "class Mine(PretrainRecipe):\n    config_sections = {'train': Train}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [path for path in sys.path if path not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_veomni_trainers", raising=False)
    config = validate({**RAW, "recipe": "my_veomni_trainers:Mine", "train": {"freeze_vit": True}})
    assert config.train.freeze_vit is True  # the `honing` command's path holds no current folder: it was added
    with pytest.raises(ConfigError, match=r"recipe: cannot import 'my_missing_trainers:Mine'"):
        validate({**RAW, "recipe": "my_missing_trainers:Mine", "train": {}})
