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
