"""PPO under FSDP2 on 2 processes: the value model (plain on every rank, its gradients averaged by hand) stays the
same on both ranks, and a run stopped after step 2 resumes to the weights and value loss of one that never stopped."""

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed.runs import assert_same_weights, failure_excerpt, honing_train, metrics
from tests.distributed.test_grpo_sampling_fsdp import MODEL

pytestmark = pytest.mark.slow

STEPS = 3


def run(tmp_path, name, *overrides):
    """The tiny PPO run on 2 FSDP2 processes (2 prompts per rank, 2 mini-batches); its metrics by step."""
    raw = {
        "method": "ppo",
        "ppo": {
            "response_length": 8,
            "num_ppo_epochs": 2,
            "num_mini_batches": 2,
            "kl_coef": 0.1,
            "rewards": [{"name": "letter_a_share"}],
        },
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
            "global_batch_size": 4,
            "micro_batch_size": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": MODEL},
        "optim": {"lr": 1e-2},
        "callbacks": {"sample": {"enabled": False}, "console": {"plain": True}, "checkpointer": {"save_interval": 1}},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), "parallel.strategy=fsdp", *overrides, nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return metrics(tmp_path / name)


def test_ppo_under_fsdp2_trains_and_resumes_to_the_same_weights(tmp_path):
    straight = run(tmp_path, "straight")
    assert sorted(straight) == list(range(1, STEPS + 1))
    assert all(row["train/loss/value_avg"] > 0 for row in straight.values())
    run(tmp_path, "resumed", "trainer.hard_stop=2steps")
    resumed = run(tmp_path, "resumed")
    for key in ("train/loss", "train/loss/value_avg", "train/objective/kl"):
        assert resumed[STEPS][key] == straight[STEPS][key], key
    final = "hf/model.safetensors"
    assert_same_weights(load_file(str(tmp_path / "straight" / final)), load_file(str(tmp_path / "resumed" / final)))
