"""``scheduler.semantics: transformers`` against ``transformers.get_scheduler`` itself, step by step."""

import pytest
import torch
from transformers import get_scheduler

from honing.config.optim_schema import TRANSFORMERS_SCHEDULES, SchedulerSection
from honing.errors import ConfigError
from honing.optim.schedulers import lr_factor, schedule_options

STEPS = 30
BASE_LR = 2e-3
GROUP_LR = 5e-4  # a second parameter group with its own LR: LambdaLR scales each group's initial LR

# (name, warmup steps, lr_scheduler_kwargs): every step schedule transformers has, with a few kwargs sets each
CASES = [
    ("linear", 0, {}),
    ("linear", 5, {}),
    ("cosine", 4, {}),
    ("cosine", 3, {"num_cycles": 1.5}),
    ("cosine_with_restarts", 2, {}),
    ("cosine_with_restarts", 5, {"num_cycles": 3}),
    ("polynomial", 4, {}),
    ("polynomial", 2, {"power": 2.0, "lr_end": 1e-4}),
    ("constant", 0, {}),
    ("constant", 10, {}),  # transformers' constant ignores the warmup
    ("constant_with_warmup", 7, {}),
    ("inverse_sqrt", 5, {}),
    ("inverse_sqrt", 0, {}),
    ("inverse_sqrt", 4, {"timescale": 9}),
    ("cosine_with_min_lr", 5, {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", 3, {"min_lr": 3e-4, "num_cycles": 0.75}),
    ("cosine_warmup_with_min_lr", 6, {"min_lr_rate": 0.05}),
    ("cosine_warmup_with_min_lr", 4, {"min_lr": 1e-4, "warmup_lr_rate": 0.2}),
    ("warmup_stable_decay", 5, {"num_decay_steps": 10}),
    ("warmup_stable_decay", 3, {"num_decay_steps": 8, "num_stable_steps": 12, "decay_type": "linear"}),
    ("warmup_stable_decay", 6, {"num_decay_steps": 9, "warmup_type": "cosine", "decay_type": "1-sqrt",
                                "min_lr_ratio": 0.1}),
    ("warmup_stable_decay", 4, {"num_decay_steps": 6, "num_stable_steps": 5, "warmup_type": "1-sqrt",
                                "decay_type": "cosine", "num_cycles": 1.0}),  # ends before the run: its floor
]  # fmt: skip


def transformers_lrs(name: str, warmup: int, kwargs: dict) -> list[list[float]]:
    """Each group's LR at each of ``STEPS`` optimizer steps of a Hugging Face Trainer run (step, then schedule)."""
    weight, other = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([{"params": [weight]}, {"params": [other], "lr": GROUP_LR}], lr=BASE_LR)
    scheduler = get_scheduler(
        name, optimizer, num_warmup_steps=warmup, num_training_steps=STEPS, scheduler_specific_kwargs=dict(kwargs)
    )
    seen = []
    for _ in range(STEPS):
        seen.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return seen


def test_every_transformers_step_schedule_is_covered():
    assert {name for name, _, _ in CASES} == set(TRANSFORMERS_SCHEDULES)


@pytest.mark.parametrize(("name", "warmup", "kwargs"), CASES)
def test_each_step_has_transformers_lr(name, warmup, kwargs):
    # transformers' constant ignores num_warmup_steps; honing's config refuses a warmup nothing reads
    honing_warmup = 0 if name == "constant" else warmup
    section = SchedulerSection(semantics="transformers", name=name, warmup_steps=honing_warmup, kwargs=kwargs)
    options = schedule_options(section, BASE_LR)
    for step, expected in enumerate(transformers_lrs(name, warmup, kwargs), start=1):
        factor = lr_factor(step, max_steps=STEPS, **options)
        ours = [BASE_LR * factor, GROUP_LR * factor]  # honing's step: each group's initial_lr x the factor
        assert ours == pytest.approx(expected, abs=1e-12, rel=0), (name, step)


def test_warmup_starts_at_zero_and_a_ratio_rounds_as_transformers():
    options = schedule_options(SchedulerSection(semantics="transformers", name="linear", warmup_steps=4), BASE_LR)
    assert lr_factor(1, max_steps=STEPS, **options) == 0.0
    honing = schedule_options(SchedulerSection(name="linear", warmup_steps=4), BASE_LR)
    assert lr_factor(1, max_steps=STEPS, **honing) == 0.25  # honing's own warmup: one step ahead
    # 0.07 x 100 = 7.000000000000001: transformers' ceil gives 8 warmup steps, honing's own 7
    ratio = SchedulerSection(semantics="transformers", name="linear", warmup_ratio=0.07)
    assert lr_factor(8, max_steps=100, **schedule_options(ratio, BASE_LR)) == pytest.approx(7 / 8)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"semantics": "transformers", "name": "reduce_lr_on_plateau"}, "evaluation metric"),
        ({"semantics": "transformers", "name": "exp"}, "not a transformers schedule"),
        ({"name": "polynomial"}, "a transformers name: set scheduler.semantics: transformers"),
        ({"name": "cosine", "kwargs": {"num_cycles": 1}}, "scheduler.kwargs.num_cycles: read under"),
        ({"semantics": "transformers", "name": "linear", "kwargs": {"power": 2}}, "not read by transformers' 'linear'"),
        ({"semantics": "transformers", "name": "cosine", "min_lr_ratio": 0.1}, "scheduler.min_lr_ratio: honing's own"),
        ({"semantics": "transformers", "name": "cosine_with_min_lr"}, "exactly one of min_lr and min_lr_rate"),
        ({"semantics": "transformers", "name": "warmup_stable_decay"}, "num_decay_steps: required"),
        ({"semantics": "transformers", "name": "constant", "warmup_steps": 3}, "'constant' has no warmup"),
    ],
)
def test_refused_in_one_line(section, message):
    with pytest.raises(ValueError, match=message):
        SchedulerSection(**section)


def test_polynomial_end_above_the_lr_is_refused_before_training():
    section = SchedulerSection(semantics="transformers", name="polynomial", kwargs={"lr_end": 0.01})
    with pytest.raises(ConfigError, match=r"scheduler.kwargs.lr_end: 0.01 must be below optim.lr \(0.002\)"):
        schedule_options(section, BASE_LR)
