"""A foreign config's ``lr_scheduler_type`` / ``lr_scheduler_kwargs`` train at the Hugging Face Trainer's LR, step for
step (``scheduler.semantics: transformers``), and what transformers ignores is said in the header."""

import copy

import pytest
import torch
import yaml
from transformers import get_scheduler

from honing.config import validate
from honing.interop.configs import convert_file, translate
from honing.optim.schedulers import lr_factor, schedule_options

OUMI = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
    "training": {"trainer_type": "TRL_SFT", "learning_rate": 1e-3, "max_steps": 20},
}
STEPS = 20


def oumi(**training):
    """``OUMI`` with ``training`` keys set, translated and validated."""
    raw = copy.deepcopy(OUMI)
    raw["training"].update(training)
    translation = translate(raw)
    return translation, validate(translation.config, source="oumi")


def hf_trainer_lrs(name, warmup, kwargs, lr):
    """The LR of each optimizer step of a Trainer run with this schedule (the optimizer steps, then the schedule)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=STEPS,
                              scheduler_specific_kwargs=kwargs)  # fmt: skip
    lrs = []
    for _ in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def honing_lrs(config):
    options = schedule_options(config.scheduler, config.optim.lr)
    return [config.optim.lr * lr_factor(step, max_steps=STEPS, **options) for step in range(1, STEPS + 1)]


@pytest.mark.parametrize(
    ("training", "name", "warmup", "kwargs"),
    [
        ({}, "linear", 0, {}),  # Oumi's default: transformers' linear, to 0
        ({"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}, "warmup_ratio": 0.1},
         "cosine_with_min_lr", 2, {"min_lr_rate": 0.1}),
        ({"lr_scheduler_type": "warmup_stable_decay", "warmup_steps": 3,
          "lr_scheduler_kwargs": {"num_decay_steps": 5, "decay_type": "linear"}},
         "warmup_stable_decay", 3, {"num_decay_steps": 5, "decay_type": "linear"}),
        ({"lr_scheduler_type": "polynomial", "warmup_steps": 4, "lr_scheduler_kwargs": {"power": 2.0}},
         "polynomial", 4, {"power": 2.0}),
        ({"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 5}, "constant_with_warmup", 5, {}),
    ],
)  # fmt: skip
def test_an_oumi_schedule_trains_at_the_trainers_lr_every_step(training, name, warmup, kwargs):
    translation, config = oumi(**training)
    assert translation.refused == []
    assert config.scheduler.semantics == "transformers" and config.scheduler.name == name
    assert honing_lrs(config) == pytest.approx(hf_trainer_lrs(name, warmup, kwargs, 1e-3), abs=1e-12, rel=0)


def test_oumi_constant_with_warmup_steps_has_no_warmup_as_transformers_and_the_header_says_so(tmp_path):
    translation, config = oumi(lr_scheduler_type="constant", warmup_steps=10)
    assert translation.refused == []
    assert config.scheduler.name == "constant" and config.scheduler.warmup_steps == 0
    assert honing_lrs(config) == hf_trainer_lrs("constant", 10, {}, 1e-3) == [1e-3] * STEPS
    path = tmp_path / "oumi.yaml"
    raw = copy.deepcopy(OUMI)
    raw["training"].update(lr_scheduler_type="constant", warmup_steps=10)
    path.write_text(yaml.safe_dump(raw))
    header = [line for line in convert_file(str(path)).splitlines() if line.startswith("#")]
    assert any("training.warmup_steps: the warmup is ignored: transformers' 'constant'" in line for line in header)


def test_what_transformers_cannot_run_is_refused_in_one_line():
    raw = copy.deepcopy(OUMI)
    raw["training"].update(lr_scheduler_type="linear", lr_scheduler_kwargs={"num_cycles": 2})
    assert translate(raw).refused == [
        "training.lr_scheduler_kwargs.num_cycles: not read by transformers' 'linear' (it reads: none)"
    ]
    translation, _ = oumi(lr_scheduler_type="constant", lr_scheduler_kwargs={"num_cycles": 2})
    assert "training.lr_scheduler_kwargs.num_cycles: ignored by transformers' 'constant', as here" in translation.notes
    raw["training"].update(lr_scheduler_type="reduce_lr_on_plateau")
    assert translate(raw).refused[0].startswith("training.lr_scheduler_type: 'reduce_lr_on_plateau' is not available")
    raw["training"].update(lr_scheduler_type="cosine", lr_scheduler_kwargs={"power": 2.0})
    assert translate(raw).refused == [
        "training.lr_scheduler_kwargs.power: not read by transformers' 'cosine' (it reads: num_cycles)"
    ]


def test_axolotls_cosine_floor_is_transformers_cosine_with_min_lr():
    raw = {
        "base_model": "some/model",
        "datasets": [{"path": "rows.jsonl", "type": "alpaca"}],
        "lr_scheduler": "cosine",
        "cosine_min_lr_ratio": 0.1,
    }
    translation = translate(raw)
    assert translation.get("scheduler.semantics") == "transformers"
    assert translation.get("scheduler.name") == "cosine_with_min_lr"
    assert translation.get("scheduler.kwargs.min_lr_rate") == 0.1
