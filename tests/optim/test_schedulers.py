import math

import pytest

from honing.optim.schedulers import lr_factor


def test_warmup_is_linear_for_every_schedule():
    for name in ("constant", "linear", "cosine", "wsd"):
        assert lr_factor(1, name=name, max_steps=100, warmup_steps=10) == pytest.approx(0.1)
        assert lr_factor(10, name=name, max_steps=100, warmup_steps=10) == pytest.approx(1.0)


def test_cosine_hand_computed():
    # halfway through the decay: min + (1-min) * 0.5 * (1 + cos(pi/2)) = 0.1 + 0.9 * 0.5
    assert lr_factor(60, name="cosine", max_steps=110, warmup_steps=10, min_lr_ratio=0.1) == pytest.approx(0.55)
    assert lr_factor(110, name="cosine", max_steps=110, warmup_steps=10, min_lr_ratio=0.1) == pytest.approx(0.1)
    expected = 0.5 * (1 + math.cos(math.pi * 0.25))
    assert lr_factor(25, name="cosine", max_steps=100, min_lr_ratio=0.0) == pytest.approx(expected)


def test_linear_and_constant():
    assert lr_factor(50, name="linear", max_steps=100, min_lr_ratio=0.0) == pytest.approx(0.5)
    assert lr_factor(100, name="linear", max_steps=100, min_lr_ratio=0.2) == pytest.approx(0.2)
    assert lr_factor(99, name="constant", max_steps=100) == 1.0


def test_wsd_stable_then_decays_over_last_fraction():
    kwargs = dict(name="wsd", max_steps=100, warmup_steps=10, min_lr_ratio=0.0, decay_fraction=0.2)
    assert lr_factor(80, **kwargs) == 1.0
    assert lr_factor(90, **kwargs) == pytest.approx(0.5)
    assert lr_factor(100, **kwargs) == pytest.approx(0.0)


def test_unknown_schedule():
    with pytest.raises(ValueError, match="unknown scheduler"):
        lr_factor(5, name="exp", max_steps=10)


def test_warmup_ratio_is_a_share_of_the_total_steps():
    from honing.optim.schedulers import warmup_steps_for

    assert warmup_steps_for(0.1, 100) == 10
    assert warmup_steps_for(0.1, 95) == 10  # 9.5 rounds up
    assert warmup_steps_for(0.07, 100) == 7  # not 8 from 7.000000000000001
    assert warmup_steps_for(0.0, 100) == 0
    for name in ("constant", "linear", "cosine", "wsd"):
        kwargs = dict(name=name, max_steps=200, min_lr_ratio=0.1)
        for step in (1, 10, 20, 21, 120, 200):
            assert lr_factor(step, warmup_ratio=0.1, **kwargs) == lr_factor(step, warmup_steps=20, **kwargs)
    assert lr_factor(1, name="cosine", max_steps=200, warmup_ratio=0.1) == pytest.approx(1 / 20)
    assert lr_factor(1, name="cosine", max_steps=200, warmup_ratio=0.0) == lr_factor(1, name="cosine", max_steps=200)


def test_warmup_ratio_in_the_config_excludes_warmup_steps():
    from honing.config import ConfigError, validate

    base = {"data": {"train": {"sources": [{"path": "corpus.txt"}]}}, "model": {"config": {"model_type": "llama"}}}
    assert validate({**base, "scheduler": {"warmup_ratio": 0.1}}).scheduler.warmup_ratio == 0.1
    assert validate({**base, "scheduler": {"warmup_steps": 5}}).scheduler.warmup_ratio is None
    with pytest.raises(ConfigError, match="scheduler: give scheduler.warmup_steps or scheduler.warmup_ratio, not both"):
        validate({**base, "scheduler": {"warmup_steps": 5, "warmup_ratio": 0.1}})
    with pytest.raises(ConfigError, match=r"scheduler.warmup_ratio: Input should be less than 1"):
        validate({**base, "scheduler": {"warmup_ratio": 1.0}})
