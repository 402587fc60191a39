"""Muon's own knobs (``optim.muon_*``): Nesterov, the Newton-Schulz steps and the LR adjustment reach
torch.optim.Muon (a step equals torch's own Muon with those arguments), ``original`` equals Keller Jordan's
reference update (olmOCR's Muon) step for step, and the AdamW half's LR and olmOCR's head / embedding / scalar
multipliers give each group its LR and AdamW's own update at it; a muon key under another optimizer is refused."""

from __future__ import annotations

import copy

import pytest
import torch

from honing.config import ConfigError
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.optim.muon_adamw import USE_MUON
from honing.optim.muon_groups import MuonKnobs
from tests.helpers import tiny_llama
from tests.recipes.test_sft import sft_config

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
GATE_PROJ = "model.layers.0.mlp.gate_proj.weight"


def with_gradients(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=generator)
    return model


def keller_jordan_zeropower(grad: torch.Tensor, steps: int) -> torch.Tensor:
    """github.com/KellerJordan/Muon muon.py's zeropower_via_newtonschulz5, as written there (bf16)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    x = grad.bfloat16()
    if grad.size(-2) > grad.size(-1):
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        gram = x @ x.mT
        poly = b * gram + c * gram @ gram
        x = a * x + poly @ x
    if grad.size(-2) > grad.size(-1):
        x = x.mT
    return x


def keller_jordan_step(param, grad, buffer, *, lr, weight_decay, beta, steps, nesterov):
    """Its muon_update and SingleDeviceMuonWithAuxAdam's Muon-group step, on one matrix."""
    buffer.lerp_(grad, 1 - beta)
    update = grad.lerp_(buffer, beta) if nesterov else buffer
    update = keller_jordan_zeropower(update, steps) * max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    param.mul_(1 - lr * weight_decay)
    param.add_(update.reshape(param.shape), alpha=-lr)


def distance_from_keller_jordan(adjust_lr: str, nesterov: bool) -> float:
    """The relative distance after 3 steps between honing's Muon and the reference, on a 64 x 32 matrix."""
    model = tiny_llama()
    knobs = MuonKnobs(nesterov=nesterov, ns_steps=4, adjust_lr=adjust_lr)
    settings = OptimizerSettings(name="muon", lr=0.02, weight_decay=0.1, momentum=0.9, muon=knobs)
    optimizer = build_optimizer(model, settings)
    weight = model.get_parameter(GATE_PROJ)  # Keller Jordan's sqrt(rows / cols) scales it by sqrt(2)
    start = weight.detach().clone()
    reference, buffer = start.clone(), torch.zeros_like(weight)
    for seed in range(3):
        with_gradients(model, seed)
        grad = weight.grad.clone()
        optimizer.step()
        keller_jordan_step(reference, grad, buffer, lr=0.02, weight_decay=0.1, beta=0.9, steps=4, nesterov=nesterov)
    moved, expected = weight.detach() - start, reference - start
    return float((moved - expected).norm() / expected.norm())


@pytest.mark.parametrize("nesterov", [True, False])
def test_the_original_adjustment_is_keller_jordans_update(nesterov):
    # both orthogonalise in bfloat16 (torch with fused addmm, the reference with separate products), so the
    # updates agree to bfloat16's rounding (3% here); Moonshot's scaling is 0.2 x sqrt(64) / sqrt(2) = 1.13 times
    # larger, far outside it
    assert distance_from_keller_jordan("original", nesterov) < 0.05
    assert distance_from_keller_jordan("match_rms_adamw", nesterov) > 0.1


def test_the_knobs_reach_torchs_muon():
    model = with_gradients(tiny_llama())
    reference = with_gradients(copy.deepcopy(model))  # the same gradients, set again
    knobs = MuonKnobs(nesterov=False, ns_steps=2, adjust_lr="match_rms_adamw")
    build_optimizer(model, OptimizerSettings(name="muon", lr=0.01, weight_decay=0.0, muon=knobs)).step()
    torch.optim.Muon(
        [reference.get_parameter(Q_PROJ)], lr=0.01, weight_decay=0.0, nesterov=False, ns_steps=2,
        adjust_lr_fn="match_rms_adamw",
    ).step()  # fmt: skip
    assert torch.equal(model.get_parameter(Q_PROJ), reference.get_parameter(Q_PROJ))
    default = with_gradients(tiny_llama())
    build_optimizer(default, OptimizerSettings(name="muon", lr=0.01, weight_decay=0.0)).step()
    assert not torch.equal(default.get_parameter(Q_PROJ), model.get_parameter(Q_PROJ))  # nesterov, 5 steps differ


def test_the_adamw_half_takes_its_own_lr_times_the_multipliers_and_adamws_update():
    model = with_gradients(tiny_llama(tie_word_embeddings=False))
    reference = with_gradients(copy.deepcopy(model))
    knobs = MuonKnobs(adamw_lr=0.004, head_multiplier=11.0, embed_multiplier=30.0, scalar_multiplier=2.0)
    optimizer = build_optimizer(model, OptimizerSettings(name="muon", lr=0.02, weight_decay=0.0, muon=knobs))
    lr_of = {id(p): group["lr"] for group in optimizer.param_groups if not group[USE_MUON] for p in group["params"]}
    expected = {"lm_head.weight": 0.044, "model.embed_tokens.weight": 0.12, "model.norm.weight": 0.008}
    for name, lr in expected.items():
        assert lr_of[id(model.get_parameter(name))] == pytest.approx(lr)
    assert {g["lr"] for g in optimizer.param_groups if g[USE_MUON]} == {0.02}
    optimizer.step()
    for name, lr in expected.items():
        param = reference.get_parameter(name)
        torch.optim.AdamW([param], lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0).step()
        torch.testing.assert_close(model.get_parameter(name), param, atol=1e-7, rtol=0)


def test_a_muon_key_under_another_optimizer_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"optim.muon_nesterov: not used by optim.name 'adamw' \(used by: muon\)"):
        sft_config(tmp_path, optim={"muon_nesterov": False})
    config = sft_config(tmp_path, optim={"name": "muon", "muon_ns_steps": 3, "muon_lr_multiplier_head": 11.0})
    knobs = OptimizerSettings.from_config(config.optim).muon
    assert knobs.ns_steps == 3 and knobs.head_multiplier == 11.0 and knobs.nesterov is True
