"""``parallel.activation_checkpointing: auto`` (the default): none, every second block, then every block, the least
whose planned peak fits 90% of the GPU; none on CPU; an explicit setting as written."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from honing.config import validate
from honing.config.parallel_schema import ParallelSection
from honing.models.parallel import parallelize_from
from honing.parallel_dims import ParallelDims
from honing.plan.auto_checkpointing import choose_activation_checkpointing
from honing.plan.checkpointing_ladder import HEADROOM, checkpointing_for_budget
from honing.plan.estimate import estimate
from honing.plan.from_config import plan_inputs
from tests.helpers import tiny_llama
from tests.plan.test_estimate import inputs

CUDA = torch.device("cuda", 0)


def peaks(plan):
    """The planned peak of each rung: none, every second block, every block."""
    return [
        estimate(replace(plan, activation_checkpointing=mode, checkpointing_every=2)).peak
        for mode in ("none", "every_n", "full")
    ]


def test_the_least_recomputation_that_fits_is_taken():
    plan = inputs(layers=8, activation_bytes_per_token_layer=50_000.0)
    none, every_second, full = peaks(plan)
    assert none > every_second > full  # each rung saves memory
    assert checkpointing_for_budget(plan, int(none / HEADROOM) + 1)[0] == "none"
    assert checkpointing_for_budget(plan, int(none / HEADROOM) - 1)[0] == "every_n"
    assert checkpointing_for_budget(plan, int(every_second / HEADROOM) - 1)[0] == "full"
    mode, _, result = checkpointing_for_budget(plan, int(full / 2))  # nothing fits: full, the least memory
    assert mode == "full" and result.peak == full


def run_config(tmp_path, device="cuda", **parallel):
    """A tiny SFT run; on ``cuda`` its plan counts the CUDA runtime's fixed allowance (on CPU: this process's RSS,
    which moves between two plans)."""
    return validate(
        {
            "method": "sft",
            "trainer": {"save_folder": str(tmp_path / "run"), "device": device},
            "data": {
                "train": {"sources": [{"path": "generated:reverse?samples=16&seed=0"}]},
                "chat_template": "chatml",
                "seq_len": 256,
                "global_batch_size": 8,
                "cache_dir": str(tmp_path / "cache"),
            },
            "model": {
                "config": {
                    "model_type": "llama",
                    "hidden_size": 64,
                    "num_hidden_layers": 4,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 2,
                    "intermediate_size": 128,
                    "vocab_size": 300,
                },
            },  # fmt: skip
            "parallel": parallel,
        }
    )


def test_a_cuda_run_plans_its_own_config_against_the_gpus_memory(tmp_path, monkeypatch):
    config = run_config(tmp_path)
    assert config.parallel.activation_checkpointing == "auto" == ParallelSection().activation_checkpointing
    plan, _ = plan_inputs(config, nproc=1)
    none, every_second, full = peaks(plan)
    for budget, expected in ((int(none / HEADROOM) + 1, "none"), (int(every_second / HEADROOM) - 1, "full")):
        properties = SimpleNamespace(total_memory=budget)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device, p=properties: p)
        choice = choose_activation_checkpointing(config, device=CUDA, nproc=1)
        assert choice.mode == expected and f"auto -> {expected} (planned peak" in choice.line


def test_cpu_runs_and_explicit_settings_plan_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", pytest.fail)  # never asked
    choice = choose_activation_checkpointing(run_config(tmp_path, "cpu"), device=torch.device("cpu"), nproc=1)
    assert (choice.mode, choice.line) == ("none", "parallel.activation_checkpointing: auto -> none (cpu)")
    explicit = run_config(tmp_path, activation_checkpointing="every_n", activation_checkpointing_every=3)
    choice = choose_activation_checkpointing(explicit, device=CUDA, nproc=1)
    assert (choice.mode, choice.every, choice.line) == ("every_n", 3, None)


def checkpointed(model):
    """Blocks whose forward was replaced by the checkpointing one (``honing.models.parallel.checkpoint_block``)."""
    return sum("forward" in vars(layer) for layer in model.model.layers)


@pytest.mark.parametrize("resolved, expected", [(None, 0), (("full", 2), 2), (("every_n", 2), 1)])
def test_the_resolved_choice_is_what_parallelize_applies(resolved, expected):
    section = ParallelSection(strategy="none")  # activation_checkpointing: auto, unresolved: none
    model = parallelize_from(
        tiny_llama(), section, dims=ParallelDims(), device=torch.device("cpu"), precision="fp32", checkpointing=resolved
    )
    assert checkpointed(model) == expected
