"""DDP and FSDP2 over 2 processes (``honing train --nproc 2``) train exactly like 1 process on the same
global batch: the same losses and global gradient norms at every step, and an exported model."""

import pytest
from safetensors.torch import load_file

from tests.distributed.runs import honing_train, metrics, write_config

pytestmark = pytest.mark.slow

STEPS = 10


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    config, save_folder = write_config(tmp_path_factory.mktemp("single"), "run", steps=STEPS)
    result = honing_train(config)
    assert result.returncode == 0, result.stderr
    return metrics(save_folder)


# FSDP2 also with activation checkpointing: recomputing blocks in backward changes no number
@pytest.mark.parametrize("strategy, extra", [("fsdp", ["parallel.activation_checkpointing=full"]), ("ddp", [])])
def test_two_processes_match_one(tmp_path, single_process, strategy, extra):
    config, save_folder = write_config(tmp_path, strategy, steps=STEPS)
    result = honing_train(config, f"parallel.strategy={strategy}", *extra, nproc=2)
    assert result.returncode == 0, result.stderr
    assert "joined process group: rank 0 of 2" in result.stderr
    parallel = metrics(save_folder)
    assert sorted(parallel) == sorted(single_process) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        one, two = single_process[step], parallel[step]
        assert two["train/loss"] == pytest.approx(one["train/loss"], abs=1e-5), step
        # the norm of the gradients of the whole model over the whole batch, not of one rank's shard
        assert two["optim/grad_norm"] == pytest.approx(one["optim/grad_norm"], abs=1e-5), step
        assert two["train/target_tokens"] == one["train/target_tokens"] == 8 * 31
    # rank 0 gathered the full weights (sharded under FSDP2) and exported them; the sample ran
    exported = load_file(str(save_folder / "hf" / "model.safetensors"))
    assert exported["model.layers.1.mlp.up_proj.weight"].shape == (64, 32)
    assert "--- sample (step 10) ---" in result.stdout
