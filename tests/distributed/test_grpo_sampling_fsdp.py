"""DAPO's dynamic sampling under FSDP2 on 2 processes, with RLOO and with GSPO: every rank takes part in every
refill round (no rank waits in a forward the other never runs), and a run stopped after step 2 resumes to the
weights of one that never stopped."""

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed.runs import assert_same_weights, failure_excerpt, honing_train, metrics
from tests.helpers import TINY_LLAMA_CONFIG
from tests.recipes.test_grpo_estimators import FLAT_REWARD

pytestmark = pytest.mark.slow

STEPS = 3
MODEL = TINY_LLAMA_CONFIG
SECTIONS = {
    "rloo": {"beta": 0.05, "normalize_advantages": True},
    "grpo": {"importance_sampling_level": "sequence", "loss_type": "grpo"},
}


def run(tmp_path, name, method, *overrides):
    """The tiny run of ``method`` with dynamic sampling on 2 FSDP2 processes; its metrics by step."""
    section = {
        "num_generations": 4,
        "max_completion_length": 8,
        "rewards": [{"name": "flat_reward_fsdp:flat_for_some"}],
        "filter_groups": {"enable": True, "max_num_gen_batches": 4},
        **SECTIONS[method],
    }
    raw = {
        "method": method,
        method: section,
        "trainer": {
            "save_folder": str(tmp_path / name),
            "max_duration": f"{STEPS}steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {
            "train": {"sources": [{"path": "generated:reverse?samples=32&seed=0"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 4,  # 2 prompts per rank
            "micro_batch_size": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": MODEL},
        "optim": {"lr": 1e-2},
        "callbacks": {"sample": {"enabled": False}, "console": {"plain": True}},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), "parallel.strategy=fsdp", *overrides, nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return metrics(tmp_path / name)


@pytest.mark.parametrize("method", sorted(SECTIONS))
def test_dynamic_sampling_under_fsdp2_refills_on_every_rank_and_resumes(tmp_path, monkeypatch, method):
    (tmp_path / "flat_reward_fsdp.py").write_text(FLAT_REWARD.format(modulus=2))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    straight = run(tmp_path, "straight", method)
    assert sorted(straight) == list(range(1, STEPS + 1))
    assert any(row["train/num_gen_batches"] > 1 for row in straight.values())  # refills happened
    assert all(row["train/dynamic_sampling/refill_prompts"] % 2 == 0 for row in straight.values())  # both ranks
    run(tmp_path, "resumed", method, "trainer.hard_stop=2steps")
    resumed = run(tmp_path, "resumed", method)
    for key in ("train/loss", "train/num_gen_batches", "train/dynamic_sampling/dropped_groups"):
        assert resumed[STEPS][key] == straight[STEPS][key], key
    final = "hf/model.safetensors"
    assert_same_weights(load_file(str(tmp_path / "straight" / final)), load_file(str(tmp_path / "resumed" / final)))
