"""Checkpoints reshard: saved by 2 FSDP2 processes, resumed by 1 process or by 2 DDP processes, and saved
by 1 resumed by 2: the weights right after loading are the saved ones bit for bit, and training goes on
to the end with the losses of the run that never stopped."""

import pytest

from tests.distributed.runs import assert_same_weights, honing_train, metrics, weights, write_config

pytestmark = pytest.mark.slow

STEPS = 8
RESEEDED = "the data position is kept, RNG states are re-seeded"  # the trainer's warning


def dump_weights(save_folder, steps=()):
    return {
        "import_path": "tests.distributed.callbacks:DumpWeights",
        "kwargs": {"folder": str(save_folder / "weights"), "steps": list(steps)},
    }


def start(tmp_path, name, *, save_interval, dump_steps, load_path=None, strategy="auto", nproc=None):
    """Run ``name`` to STEPS (resuming from ``load_path``); return its save folder and stderr."""
    save_folder = tmp_path / name
    config, _ = write_config(
        tmp_path, name, steps=STEPS, save_interval=save_interval, custom=[dump_weights(save_folder, dump_steps)]
    )
    overrides = [f"parallel.strategy={strategy}"] + ([f"trainer.load_path={load_path}"] if load_path else [])
    result = honing_train(config, *overrides, nproc=nproc)
    assert result.returncode == 0, result.stderr
    return save_folder, result.stderr


def assert_resumed_and_finished(resumed, reference, first_step):
    """The resumed run trained every remaining step with the reference run's losses."""
    resumed_metrics, reference_metrics = metrics(resumed), metrics(reference)
    assert sorted(resumed_metrics) == list(range(first_step, STEPS + 1))
    for step in range(first_step, STEPS + 1):
        assert resumed_metrics[step]["train/loss"] == pytest.approx(reference_metrics[step]["train/loss"], abs=1e-5), (
            step
        )
    assert (resumed / f"step{STEPS}" / ".complete").exists()


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """2 processes, FSDP2, a checkpoint at step 4."""
    save_folder, _ = start(
        tmp_path_factory.mktemp("fsdp"), "fsdp", save_interval=4, dump_steps=[4], strategy="fsdp", nproc=2
    )
    return save_folder


@pytest.fixture(scope="module")
def single_resumed(tmp_path_factory, fsdp_run):
    """1 process resumed from the FSDP2 run's step 4, saving at step 6."""
    return start(
        tmp_path_factory.mktemp("single"), "single", save_interval=6, dump_steps=[6], load_path=fsdp_run / "step4"
    )


def test_two_fsdp_processes_to_one(fsdp_run, single_resumed):
    save_folder, stderr = single_resumed
    assert_same_weights(weights(save_folder / "weights" / "begin.pt"), weights(fsdp_run / "weights" / "step4.pt"))
    assert_resumed_and_finished(save_folder, fsdp_run, first_step=5)
    assert "world size changed since the checkpoint (2 → 1): " + RESEEDED in stderr


def test_fsdp_to_ddp(tmp_path, fsdp_run):
    save_folder, _ = start(
        tmp_path, "ddp", save_interval=100, dump_steps=[], load_path=fsdp_run / "step4", strategy="ddp", nproc=2
    )
    assert_same_weights(weights(save_folder / "weights" / "begin.pt"), weights(fsdp_run / "weights" / "step4.pt"))
    assert_resumed_and_finished(save_folder, fsdp_run, first_step=5)


def test_one_process_to_two_fsdp(tmp_path, fsdp_run, single_resumed):
    single, _ = single_resumed
    save_folder, stderr = start(
        tmp_path, "two", save_interval=100, dump_steps=[], load_path=single / "step6", strategy="fsdp", nproc=2
    )
    assert_same_weights(weights(save_folder / "weights" / "begin.pt"), weights(single / "weights" / "step6.pt"))
    assert_resumed_and_finished(save_folder, fsdp_run, first_step=7)
    assert "world size changed since the checkpoint (1 → 2): " + RESEEDED in stderr
