"""``optim.name``: every optimizer trains the quickstart (a smaller model, 50 steps) to a lower loss than at step 1
and resumes bit-identically from a checkpoint taken half way; aliases resolve; Muon's parameter rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from honing.config import ConfigError, apply_overrides, load_config, read_yaml, validate
from honing.config.optimizers import resolve_optimizer
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.optim.muon_adamw import USE_MUON, MuonWithAdamW
from tests.helpers import tiny_llama

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")

#: the quickstart's data and schedule shape, on a model and batch small enough for a test
SMALL = [
    "trainer.device=cpu",
    "trainer.metrics_collect_interval=5",
    "model.config.hidden_size=32",
    "model.config.num_hidden_layers=1",
    "model.config.num_attention_heads=2",
    "model.config.num_key_value_heads=2",
    "model.config.intermediate_size=64",
    "data.seq_len=64",
    "data.global_batch_size=4",
    "data.micro_batch_size=4",
    "scheduler.warmup_steps=5",
    "callbacks.sample.enabled=false",
    "callbacks.evaluator.enabled=false",
    "callbacks.console.enabled=false",
    "callbacks.checkpointer.async_save=false",
]

#: optimizer → its overrides (SGD takes a larger step size than the adaptive ones, as usual)
OPTIMIZERS = {
    "adamw_torch_fused": ["optim.name=adamw_torch_fused"],
    "adamw_torch": ["optim.name=adamw_torch"],
    "sgd": ["optim.name=sgd", "optim.lr=0.3", "optim.momentum=0.9"],
    "adafactor": ["optim.name=adafactor", "optim.lr=0.05"],  # torch's Adafactor: a relative step size
    "muon": ["optim.name=muon", "optim.momentum=0.95"],
}


def train(save_folder: Path, cache: Path, overrides: list[str]) -> None:
    from honing.recipes import recipe_class

    raw = read_yaml(QUICKSTART)
    # optim.name on the command line drops the quickstart's AdamW betas for SGD and Adafactor (with an info line)
    apply_overrides(raw, [*SMALL, f"trainer.save_folder={save_folder}", f"data.cache_dir={cache}", *overrides])
    config = validate(raw)
    recipe_class(config.method)(config).run()


def losses(save_folder: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["train/loss"] for row in rows if "train/loss" in row}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_learns_the_quickstart_and_resumes_bit_identically(tmp_path, name):
    overrides = [*OPTIMIZERS[name], "trainer.max_duration=50steps"]
    cache = tmp_path / "cache"
    train(tmp_path / "whole", cache, overrides)
    whole = losses(tmp_path / "whole")
    assert whole[50] < whole[1] - 0.5, (name, whole[1], whole[50])

    # stopped at step 25 (a checkpoint), then the same command again without the stop resumes to 50
    train(tmp_path / "cut", cache, [*overrides, "trainer.hard_stop=25steps"])
    assert sorted(p.name for p in (tmp_path / "cut").glob("step*")) == ["step25"]
    train(tmp_path / "cut", cache, overrides)
    cut = losses(tmp_path / "cut")
    assert cut[50] == whole[50]
    a = load_file(tmp_path / "whole" / "hf" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "hf" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a), name


def test_aliases_resolve_and_unknown_names_are_refused_in_one_line(tmp_path):
    assert resolve_optimizer("adamw_torch_fused") == ("adamw", True)
    assert resolve_optimizer("adamw_torch") == ("adamw", False)
    assert resolve_optimizer("SGD") == ("sgd", None)
    base = [f"trainer.save_folder={tmp_path}"]
    with pytest.raises(ConfigError, match=r"optim.name: 'lion' is not available: torch 2.14 has no Lion") as info:
        load_config(QUICKSTART, [*base, "optim.name=lion"])
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"optim.betas: not used by optim.name 'sgd' \(used by: adamw, muon\)"):
        load_config(QUICKSTART, [*base, "optim.name=sgd", "optim.betas=[0.9, 0.9]"])
    # the file's betas (the quickstart's AdamW) are dropped when the command line switches the optimizer
    assert "betas" not in load_config(QUICKSTART, [*base, "optim.name=sgd"]).optim.model_fields_set
    with pytest.raises(ConfigError, match=r"optim.momentum: not used by optim.name 'adamw'"):
        load_config(QUICKSTART, [*base, "optim.momentum=0.9"])


def test_adamw_aliases_choose_the_kernel():
    fused = build_optimizer(tiny_llama(), OptimizerSettings(name="adamw_torch_fused"))
    foreach = build_optimizer(tiny_llama(), OptimizerSettings(name="adamw_torch"))
    assert isinstance(fused, torch.optim.AdamW) and fused.param_groups[0]["fused"] is True
    assert foreach.param_groups[0]["fused"] is False


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest():
    model = tiny_llama()
    optimizer = build_optimizer(model, OptimizerSettings(name="muon", lr=1e-3))
    assert isinstance(optimizer, MuonWithAdamW)
    by_id = {id(p): name for name, p in model.named_parameters()}
    muon = {by_id[id(p)] for g in optimizer.param_groups if g[USE_MUON] for p in g["params"]}
    adamw = {by_id[id(p)] for g in optimizer.param_groups if not g[USE_MUON] for p in g["params"]}
    assert muon and all(model.get_parameter(name).ndim == 2 for name in muon)
    assert "model.embed_tokens.weight" in adamw and "lm_head.weight" in adamw
    assert "model.layers.0.self_attn.q_proj.weight" in muon and "model.norm.weight" in adamw
    assert muon | adamw == set(by_id.values()) and not muon & adamw
    assert all("initial_lr" in group for group in optimizer.param_groups)
