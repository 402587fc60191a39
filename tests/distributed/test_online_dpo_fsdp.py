"""Online DPO under FSDP2 on 2 processes: every rank samples and ranks its own pairs (generation gathers the shards
on both ranks together), step 1's loss is ln 2 (the policy is the reference), and a run stopped after step 2 resumes
to the weights of one that never stopped."""

import math

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed.runs import assert_same_weights, failure_excerpt, honing_train, metrics
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

STEPS = 3
MODEL = TINY_LLAMA_CONFIG


def run(tmp_path, name, *overrides):
    """The tiny online DPO run on 2 FSDP2 processes; its metrics by step."""
    raw = {
        "method": "online_dpo",
        "online_dpo": {
            "max_new_tokens": 8,
            "beta": 0.5,
            "missing_eos_penalty": 1.0,
            "rewards": [{"name": "sharp_5tokens_completions"}],
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
            "global_batch_size": 4,  # 2 prompts (4 completions) per rank
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


def test_online_dpo_under_fsdp2_trains_and_resumes_exactly(tmp_path):
    straight = run(tmp_path, "straight")
    assert sorted(straight) == list(range(1, STEPS + 1))
    assert straight[1]["train/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert straight[STEPS]["train/objective/kl"] != 0.0
    run(tmp_path, "resumed", "trainer.hard_stop=2steps")
    resumed = run(tmp_path, "resumed")
    for key in ("train/loss", "train/objective/scores", "train/rewards/margins"):
        assert resumed[STEPS][key] == straight[STEPS][key], key
    final = "hf/model.safetensors"
    assert_same_weights(load_file(str(tmp_path / "straight" / final)), load_file(str(tmp_path / "resumed" / final)))
