"""``total_grad_norm`` and ``clip_grads`` against torch's ``clip_grad_norm_``, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from honing.models.parallel import clip_grads, grads_by_mesh, on_one_device, total_grad_norm


def params_with_grads(dtypes: list[torch.dtype], seed: int, scale: float) -> list[torch.nn.Parameter]:
    """Parameters of several shapes (one without a gradient) whose gradients are seeded random numbers."""
    generator = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,), (64,)]
    params = []
    for index, shape in enumerate(shapes):
        dtype = dtypes[index % len(dtypes)]
        param = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        param.grad = (torch.randn(shape, generator=generator) * scale).to(dtype)
        params.append(param)
    params.append(torch.nn.Parameter(torch.zeros(3)))  # no gradient: left out of the norm
    return params


@pytest.mark.parametrize("dtypes", [[torch.float32], [torch.float32, torch.float64]], ids=["one-dtype", "mixed"])
@pytest.mark.parametrize("scale", [3.0, 0.01], ids=["clipped", "under-max"])
def test_norm_and_clipped_grads_equal_torchs_bit_for_bit(dtypes, scale):
    ours = params_with_grads(dtypes, seed=0, scale=scale)
    theirs = params_with_grads(dtypes, seed=0, scale=scale)
    groups = grads_by_mesh(ours)
    one_device = on_one_device(ours)  # as OptimizerUpdate asks it, once
    assert one_device == (len(dtypes) == 1)
    norm = total_grad_norm(ours, groups, one_device=one_device)
    clip_grads(ours, 1.0, norm, groups, one_device=one_device)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert torch.equal(norm, expected)
    for mine, reference in zip(ours, theirs):
        assert (mine.grad is None) == (reference.grad is None)
        if mine.grad is not None:
            assert mine.grad.dtype == reference.grad.dtype
            assert torch.equal(mine.grad, reference.grad)


def test_one_device_gradients_are_clipped_without_a_copy_per_parameter():
    params = params_with_grads([torch.float32], seed=1, scale=3.0)
    groups = grads_by_mesh(params)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        clip_grads(params, 1.0, total_grad_norm(params, groups, one_device=True), groups, one_device=True)
    calls = [event.name for event in prof.events() if event.name.startswith("aten::") and event.cpu_parent is None]
    assert calls.count("aten::_foreach_norm") == 1 and calls.count("aten::_foreach_mul_") == 1
    assert "aten::to" not in calls  # torch's own clipping moves each parameter's norm to the first one's device
