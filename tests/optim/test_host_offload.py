"""``parallel.offload: optimizer``: ``HostOffloadAdamW`` computes torch's AdamW bit for bit, its state dict is
AdamW's (a checkpoint loads into either), a run through the recipe trains and resumes bit-identically, and what it
cannot do is refused in one line. On this CPU machine the "host" copies are on the same device; the CUDA copies
themselves need a GPU (benchmarks/memory.py --device cuda --modes full,full-offload)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

import honing.models.parallel
from honing.errors import ConfigError
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.optim.host_offload import HostOffloadAdamW
from honing.recipes.sft import SFTRecipe
from tests.e2e.test_cli import final_weights
from tests.helpers import tiny_llama, torchrun_script
from tests.optim.test_low_bit import config, losses

REPO = Path(__file__).resolve().parents[2]


def groups(model):
    """Two groups with their own LR and decay, as honing's decay / no-decay split makes."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.ndim >= 2], "lr": 1e-2, "weight_decay": 0.1},
        {"params": [p for p in params if p.ndim < 2], "lr": 5e-3, "weight_decay": 0.0},
    ]


def train(model, optimizer, steps, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=generator)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_update_is_torch_adamw_bit_for_bit(dtype):
    models = [tiny_llama().to(dtype) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    reference = torch.optim.AdamW(groups(models[0]), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, fused=True)
    offloaded = HostOffloadAdamW(groups(models[1]), lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    train(models[0], reference, 5)
    train(models[1], offloaded, 5)
    for (name, expected), actual in zip(models[0].named_parameters(), models[1].parameters()):
        assert torch.equal(expected, actual), name
    state = next(iter(offloaded.state.values()))
    assert sorted(state) == ["exp_avg", "exp_avg_sq", "step"] and state["step"].item() == 5


@pytest.mark.parametrize("into", [HostOffloadAdamW, torch.optim.AdamW])
def test_a_checkpoint_resumes_exactly_and_loads_into_plain_adamw(tmp_path, into):
    def make(cls):
        torch.manual_seed(0)
        model = tiny_llama()
        kwargs = {"fused": True} if cls is torch.optim.AdamW else {}
        return model, cls(groups(model), lr=1e-2, **kwargs)

    straight, straight_optim = make(HostOffloadAdamW)
    train(straight, straight_optim, 3, seed=0)
    dcp.save({"optim": get_optimizer_state_dict(straight, straight_optim)}, checkpoint_id=str(tmp_path / "ckpt"))
    saved_weights = {k: v.clone() for k, v in straight.state_dict().items()}
    train(straight, straight_optim, 3, seed=1)

    resumed, resumed_optim = make(into)
    resumed.load_state_dict(saved_weights)
    state = {"optim": get_optimizer_state_dict(resumed, resumed_optim)}
    dcp.load(state, checkpoint_id=str(tmp_path / "ckpt"))
    set_optimizer_state_dict(resumed, resumed_optim, state["optim"])
    assert all(s["exp_avg"].device.type == "cpu" for s in resumed_optim.state.values())
    train(resumed, resumed_optim, 3, seed=1)
    for (name, expected), actual in zip(straight.named_parameters(), resumed.parameters()):
        assert torch.equal(expected, actual), name


def test_loading_another_layout_is_refused():
    model = tiny_llama()
    optimizer = HostOffloadAdamW(groups(model), lr=1e-2)
    other = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with pytest.raises(ValueError, match="other parameter groups"):
        optimizer.load_state_dict(other.state_dict())
    amsgrad = torch.optim.AdamW(groups(model), lr=1e-2, amsgrad=True)
    with pytest.raises(ValueError, match=r"another update \(\{'amsgrad': True\}\)"):
        optimizer.load_state_dict(amsgrad.state_dict())


@pytest.fixture
def offload_on_cpu(monkeypatch):
    """Let ``parallel.offload: optimizer`` through on CPU, where a run refuses it (it would save nothing here):
    the recipe's path is the one a GPU run takes, the copies are CPU to CPU."""
    check = honing.models.parallel.check_offload

    def allow_optimizer(offload, activation_offload, *, device, strategy):
        check("none" if offload == "optimizer" else offload, activation_offload, device=device, strategy=strategy)

    monkeypatch.setattr(honing.models.parallel, "check_offload", allow_optimizer)


def offload_config(folder, **optim):
    raw = config(folder, **optim).model_dump(exclude_unset=True)
    raw["optim"].pop("state_dtype")
    raw["parallel"] = {"offload": "optimizer"}
    from honing.config import validate

    return validate(raw)


def test_a_run_trains_like_adamw_and_resumes_bit_identically(tmp_path, offload_on_cpu):
    plain = tmp_path / "plain"
    raw = config(plain).model_dump(exclude_unset=True)
    raw["optim"].pop("state_dtype")
    from honing.config import validate

    SFTRecipe(validate(raw)).run()
    folder = tmp_path / "run"
    recipe = SFTRecipe(offload_config(folder))
    recipe.run()
    assert isinstance(recipe.train_module.optimizer, HostOffloadAdamW)
    first = losses(folder)
    assert first == losses(plain) and first[6] < first[1]
    expected = final_weights(folder)
    shutil.rmtree(folder / "step6")
    shutil.rmtree(folder / "hf")
    SFTRecipe(offload_config(folder)).run()
    assert [losses(folder)[step] for step in (4, 5, 6)] == [first[step] for step in (4, 5, 6)]
    actual = final_weights(folder)
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_what_offload_cannot_do_is_refused_by_key(tmp_path):
    with pytest.raises(ConfigError, match="parallel.offload: 'optimizer' moves GPU memory to the host") as error:
        SFTRecipe(offload_config(tmp_path / "cpu")).build()
    assert "\n" not in str(error.value)
    model = tiny_llama()
    with pytest.raises(ConfigError, match="optim.name 'sgd' has no offloaded version"):
        build_optimizer(model, OptimizerSettings(name="sgd", offload=True))
    with pytest.raises(ConfigError, match="optim.state_dtype: int8 states are not offloaded"):
        build_optimizer(model, OptimizerSettings(state_dtype="int8", offload=True))


@pytest.mark.slow
def test_fsdp2_shards_update_like_adamw_and_resume_from_a_sharded_checkpoint(tmp_path):
    out = tmp_path / "found.json"
    result = torchrun_script(REPO / "tests/optim/host_offload_worker.py", str(out), str(tmp_path / "ckpt"))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["max_difference_to_adamw"] == 0.0
    assert found["states_sharded"]  # each rank saves its own shard of the moments
    assert found["max_difference_after_resume"] == 0.0
