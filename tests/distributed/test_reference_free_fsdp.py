"""ORPO under FSDP2 on 2 processes gives the one-process run's losses and held-out metrics (CPO / SimPO is the same
pair step with another loss part); the validation pairs split unevenly over the ranks, so one rank evaluates a
filler batch, which counts nothing."""

import pytest
import yaml

from tests.distributed.runs import failure_excerpt, honing_train, metrics
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

STEPS = 4
CONFIG = {
    "data": {
        "train": {"sources": [{"path": "generated:addition_preference?samples=64&seed=0"}]},
        # 5 pairs in batches of 2: 3 batches, so rank 1 evaluates one batch and a filler beside rank 0's two
        "validation": {"sources": [{"path": "generated:addition_preference?samples=5&seed=1"}]},
        "chat_template": "chatml",
        "seq_len": 64,
        "global_batch_size": 4,
        "micro_batch_size": 2,
    },
    "model": {"config": TINY_LLAMA_CONFIG},
    "optim": {"lr": 1e-2},
    "callbacks": {
        "sample": {"enabled": False},
        "console": {"plain": True},
        "checkpointer": {"save_interval": 100},
        "evaluator": {"interval": 2},
    },
}
KEYS = ("loss", "rewards/accuracies", "rewards/margins", "logps/chosen", "nll_loss")


def run(tmp_path, name, method, section, *overrides, nproc=None):
    """Train the tiny config with ``method`` for STEPS steps; its metrics by step."""
    raw = {
        **CONFIG,
        "method": method,
        method: section,
        "trainer": {
            "save_folder": str(tmp_path / name),
            "max_duration": f"{STEPS}steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {**CONFIG["data"], "cache_dir": str(tmp_path / "cache")},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), *overrides, nproc=nproc, timeout=240)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return metrics(tmp_path / name)


def test_fsdp2_on_two_processes_gives_the_one_process_metrics(tmp_path):
    method, section = "orpo", {"beta": 0.5}
    single = run(tmp_path, "single", method, section)
    sharded = run(tmp_path, "fsdp2", method, section, "parallel.strategy=fsdp", nproc=2)
    assert sorted(sharded) == sorted(single) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        splits = ("train", "eval") if step % 2 == 0 else ("train",)
        for key in (f"{split}/{name}" for split in splits for name in KEYS):
            assert sharded[step][key] == pytest.approx(single[step][key], rel=1e-5, abs=1e-6), (step, key)
