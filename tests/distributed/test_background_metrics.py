"""With several processes the Trainer reduces metrics in its bookkeeping thread, on a gloo group of its own,
and announces them to callbacks on the training thread with the same reduction semantics."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.distributed.runs import REPO

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent("""
    import json, sys, threading
    import torch
    import honing.train.trainer_metrics as trainer_module
    from honing.distributed import get_rank, prepare_training_environment, teardown_training_environment
    from honing.interop.olmo_core import TrainerConfig
    from honing.train import Callback
    from honing.train.metrics import ReduceType

    reduce_threads = []
    reduce_steps = trainer_module.reduce_steps

    def recording_reduce(*args, **kwargs):
        reduce_threads.append(threading.current_thread().name)
        return reduce_steps(*args, **kwargs)

    trainer_module.reduce_steps = recording_reduce

    class Module:  # the TrainModule calls the Trainer makes, recording one metric of each reduce type
        model = torch.nn.Linear(1, 1)
        def on_attach(self, trainer): self.trainer = trainer
        def zero_grads(self): pass
        def optim_step(self): pass
        def eval_batch(self, batch): return {}
        def num_tokens(self, batch): return 0
        def train_batch(self, batch, dry_run=False):
            rank, step = get_rank(), self.trainer.global_step
            self.trainer.record_metric("mean", torch.tensor(float(step + rank)), ReduceType.mean)
            self.trainer.record_metric("sum", torch.tensor(float(10 * (rank + 1))), ReduceType.sum)
            self.trainer.record_metric("max", torch.tensor(float(step - rank)), ReduceType.max)
            self.trainer.record_metric("norm", 3.0 if rank == 0 else 4.0, ReduceType.l2_norm)

    class Loader:
        epoch, batches_per_epoch = 1, 100
        def __iter__(self): return iter([{}] * 100)
        def state_dict(self): return {}

    class Logs(Callback):
        def __init__(self): self.seen = []
        def on_log(self, step, metrics): self.seen.append((step, metrics, threading.current_thread().name))

    prepare_training_environment(seed=0)
    logs = Logs()
    trainer = TrainerConfig(save_folder=sys.argv[1], max_duration="4steps", metrics_collect_interval=2,
                            callbacks={"logs": logs}, no_checkpoints=True).build(Module(), Loader())
    trainer.fit()
    with open(sys.argv[1] + f"/rank{get_rank()}.json", "w") as handle:
        json.dump({"reduce_threads": reduce_threads, "logs": logs.seen}, handle)
    teardown_training_environment()
""")


def test_metrics_are_reduced_in_the_background_and_logged_on_the_training_thread(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(script),
            str(tmp_path),
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # steps 1-2 and 3-4 collected together: one reduction each, in the bookkeeping thread
        assert len(out["reduce_threads"]) == 2
        assert all(name.startswith("honing-bookkeeping") for name in out["reduce_threads"])
        assert [step for step, _, _ in out["logs"]] == [1, 2, 3, 4]
        for step, metrics, thread in out["logs"]:
            assert thread == "MainThread"
            # mean of step + rank over ranks 0, 1; sum of 10, 20; max of step - rank; l2 norm of 3, 4
            # (beside the throughput and memory of the speed monitor TrainerConfig adds, as OLMo-core's does)
            recorded = {name: metrics[name] for name in ("mean", "sum", "max", "norm")}
            assert recorded == pytest.approx({"mean": step + 0.5, "sum": 30.0, "max": float(step), "norm": 5.0})
