"""fp16-mixed under FSDP2 over 2 processes trains as 1 process does, and an overflow on one rank's shard alone
skips the step on every rank (the ranks agree on it) with the same halved scale."""

import pytest

from honing.distributed import get_rank
from honing.train import Callback
from tests.distributed.runs import failure_excerpt, honing_train, metrics, write_config

pytestmark = pytest.mark.slow

STEPS = 5


class InfGradientOnRank(Callback):
    """Puts inf into this rank's first gradient (its shard) before the optimizer step of ``step``, on ``rank`` only."""

    def __init__(self, rank: int, step: int):
        self.rank, self.at = rank, step

    def pre_optim_step(self) -> None:
        if self.step == self.at and get_rank() == self.rank:
            grad = next(p.grad for p in self.trainer.train_module.model.parameters() if p.grad is not None)
            grad = grad.to_local() if hasattr(grad, "to_local") else grad
            grad.view(-1)[0] = float("inf")


def run(tmp_path, name, *overrides, rank, nproc=None):
    inf = {"import_path": f"{__name__}:InfGradientOnRank", "kwargs": {"rank": rank, "step": 3}}
    config, save_folder = write_config(tmp_path, name, steps=STEPS, save_interval=100, custom=[inf])
    result = honing_train(config, "trainer.precision=fp16-mixed", *overrides, nproc=nproc, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return metrics(save_folder)


def test_an_overflow_on_one_rank_skips_the_step_on_all(tmp_path):
    one = run(tmp_path, "one", rank=0)
    two = run(tmp_path, "two", "parallel.strategy=fsdp", rank=1, nproc=2)  # rank 1's shard overflows only
    assert one[3]["optim/skipped_steps"] == two[3]["optim/skipped_steps"] == 1
    for step in range(1, STEPS + 1):
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], abs=1e-4), step
        assert two[step]["optim/loss_scale"] == one[step]["optim/loss_scale"] == (2.0**15 if step > 3 else 2.0**16)
