"""Every layout of the mesh trains like one process: tensor parallelism, FSDP2 × tensor parallelism and HSDP give
the one-process run's first 10 losses and weights after 10 steps within 1e-5; a checkpoint saved under
dp_shard=2 × tp=2 resumes under other layouts (dp_shard=4, one process) and goes on with the same losses."""

import pytest

from tests.distributed.runs import failure_excerpt, honing_train, metrics, weights, write_config

pytestmark = pytest.mark.slow

STEPS = 10
# Adam moves every weight by about the learning rate whatever its gradient's size, so a gradient of rounding size
# (summed in another order by another layout) can move a weight by ~lr: 1e-2 gave 2 of 2,048 elements 1.3e-5 apart
LR = "optim.lr=1e-3"


def run(tmp_path, name, *overrides, nproc=None, save_interval=100):
    """``honing train`` of the tiny Llama with ``overrides``; its save folder, weights dumped at the last step."""
    save_folder = tmp_path / name
    dump = {
        "import_path": "tests.distributed.callbacks:DumpWeights",
        "kwargs": {"folder": str(save_folder / "weights"), "steps": [STEPS]},
    }
    config, _ = write_config(tmp_path, name, steps=STEPS, save_interval=save_interval, custom=[dump])
    result = honing_train(config, LR, *overrides, nproc=nproc, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return save_folder


def assert_same_run(folder, reference, first_step=1):
    """Losses of every step from ``first_step`` and the final weights of ``folder`` equal the reference's."""
    ours, theirs = metrics(folder), metrics(reference)
    assert sorted(ours) == list(range(first_step, STEPS + 1))
    for step in range(first_step, STEPS + 1):
        assert ours[step]["train/loss"] == pytest.approx(theirs[step]["train/loss"], rel=1e-5), step
        assert ours[step]["train/target_tokens"] == theirs[step]["train/target_tokens"], step
    final, expected = (
        weights(folder / "weights" / f"step{STEPS}.pt"),
        weights(reference / "weights" / f"step{STEPS}.pt"),
    )
    assert sorted(final) == sorted(expected)
    for name in expected:
        assert final[name] == pytest.approx(expected[name], abs=1e-5), name


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    return run(tmp_path_factory.mktemp("single"), "single")


@pytest.fixture(scope="module")
def fsdp_tp(tmp_path_factory):
    """dp_shard=2 × tp=2 on 4 processes, a checkpoint at step 5."""
    return run(
        tmp_path_factory.mktemp("fsdp_tp"), "fsdp_tp", "parallel.dp_shard=2", "parallel.tp=2", nproc=4, save_interval=5
    )


def test_tensor_parallel_matches_one_process(tmp_path, single_process):
    folder = run(tmp_path, "tp", "parallel.tp=2", nproc=2)
    assert_same_run(folder, single_process)


def test_fsdp_times_tensor_parallel_matches_one_process(fsdp_tp, single_process):
    assert_same_run(fsdp_tp, single_process)
    assert (fsdp_tp / "hf" / "model.safetensors").exists()  # rank 0 wrote the gathered full weights


def test_hsdp_matches_one_process(tmp_path, single_process):
    folder = run(tmp_path, "hsdp", "parallel.dp_replicate=2", "parallel.dp_shard=2", nproc=4)
    assert_same_run(folder, single_process)


@pytest.mark.parametrize(
    "layout, nproc", [(["parallel.dp_shard=4"], 4), ([], None), (["parallel.cp=2"], 2)], ids=["dp_shard4", "one", "cp2"]
)
def test_checkpoint_of_fsdp_tp_resumes_under_another_layout(tmp_path, fsdp_tp, single_process, layout, nproc):
    folder = run(tmp_path, "resumed", *layout, f"trainer.load_path={fsdp_tp / 'step5'}", nproc=nproc)
    assert_same_run(folder, single_process, first_step=6)


# a tiny Qwen3-MoE: 4 experts, 2 per token, every layer sparse
MOE = (
    "model.config={model_type: qwen3_moe, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2, "
    "num_key_value_heads: 2, intermediate_size: 64, moe_intermediate_size: 32, num_experts: 4, num_experts_per_tok: 2}"
)


@pytest.fixture(scope="module")
def moe_single(tmp_path_factory):
    return run(tmp_path_factory.mktemp("moe_single"), "moe_single", MOE)


@pytest.mark.parametrize("layout, nproc", [(["parallel.ep=2"], 2), (["parallel.dp_shard=2", "parallel.ep=2"], 4)])
def test_expert_parallel_moe_matches_one_process(tmp_path, moe_single, layout, nproc):
    folder = run(tmp_path, "moe_ep", MOE, *layout, nproc=nproc, save_interval=5)
    assert_same_run(folder, moe_single)
    ours, theirs = metrics(folder), metrics(moe_single)
    for step in range(1, STEPS + 1):  # the router's loss is the one process's: tokens reach the same experts
        assert ours[step]["train/aux_loss"] == pytest.approx(theirs[step]["train/aux_loss"], rel=1e-5), step
    # the experts' checkpoint (split over ep, sharded over dp_shard) resumes on one process
    resumed = run(tmp_path, "moe_resumed", MOE, f"trainer.load_path={folder / 'step5'}")
    assert_same_run(resumed, moe_single, first_step=6)


@pytest.mark.parametrize(
    "overrides, nproc, message",
    [
        # refused before any process starts
        (["parallel.tp=3"], 2, "tp=3 = 3 does not divide the world size (2 processes)"),
        (["parallel.dp_shard=2", "parallel.tp=2"], 2, "dp_shard=2 × ep=1 × cp=1 × tp=2 = 4 must equal the world size"),
        # refused by the ranks once the model exists, before training
        (["parallel.ep=2"], 2, "parallel.ep=2: the 'llama' model has no experts (not a MoE model)"),
    ],
)
def test_bad_layouts_fail_before_training_in_one_line(tmp_path, overrides, nproc, message):
    config, save_folder = write_config(tmp_path, "bad", steps=2)
    result = honing_train(config, *overrides, nproc=nproc)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("honing: error: ")
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (save_folder / "metrics.jsonl").exists()
