"""DPO and GRPO under tensor parallelism (tp=2 on 2 processes) give the one-process run's first losses: the policy
and DPO's frozen reference copy are split by the family's plan, GRPO's rollouts decode on the split weights (both
ranks of the group draw the same tokens from the same seeds)."""

import json

import pytest
import yaml

from tests.distributed.runs import failure_excerpt, honing_train
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

STEPS = 4
MODEL = TINY_LLAMA_CONFIG
COMMON = {
    "optim": {"lr": 1e-3},
    "callbacks": {"sample": {"enabled": False}, "console": {"plain": True}, "checkpointer": {"save_interval": 100}},
}
DPO = {
    "method": "dpo",
    "data": {
        "train": {"sources": [{"path": "generated:addition_preference?samples=64&seed=0"}]},
        "chat_template": "chatml",
        "seq_len": 64,
        "global_batch_size": 4,
        "micro_batch_size": 2,
    },
    "dpo": {"reference": "copy", "rpo_alpha": 0.5},
}
GRPO = {
    "method": "grpo",
    "data": {
        "train": {"sources": [{"path": "generated:reverse?samples=32&seed=0"}]},
        "chat_template": "chatml",
        "seq_len": 64,
        "global_batch_size": 2,
        "micro_batch_size": 1,
    },
    "grpo": {
        "num_generations": 4,
        "max_completion_length": 12,
        "beta": 0.1,
        "rewards": [{"name": "sharp_5tokens_completions"}],
    },
}


def run(tmp_path, name, method, *overrides, nproc=None):
    """Train ``method``'s tiny config for STEPS steps; its metrics by step."""
    raw = {
        **method,
        **COMMON,
        "model": {"config": MODEL},
        "trainer": {
            "save_folder": str(tmp_path / name),
            "max_duration": f"{STEPS}steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {**method["data"], "cache_dir": str(tmp_path / "cache")},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), *overrides, nproc=nproc, timeout=240)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows}


@pytest.mark.parametrize(
    "method, keys",
    [(DPO, ["train/loss", "train/rewards/accuracies"]), (GRPO, ["train/loss", "train/reward"])],
    ids=["dpo", "grpo"],
)
def test_tensor_parallel_gives_the_one_process_losses(tmp_path, method, keys):
    single = run(tmp_path, "single", method)
    split = run(tmp_path, "tp2", method, "parallel.tp=2", nproc=2)
    assert sorted(split) == sorted(single) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        for key in keys:
            assert split[step][key] == pytest.approx(single[step][key], rel=1e-5, abs=1e-6), (step, key)
