"""The Trainer's metrics: recorded on the hot path as device tensors, collected every ``metrics_collect_interval``
steps, reduced over ranks in the bookkeeping thread and announced to callbacks on the training thread; and the
``nonfinite_loss`` policy's check that a NaN or infinite loss stops the run before its weights are saved.
The Trainer's ``metrics``."""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist

from honing.config.schema import TrainerSection
from honing.distributed import is_distributed
from honing.errors import NonFiniteLossError
from honing.train.metrics import MetricMergeStrategy, MetricsBuffer, MetricValue, ReduceType, reduce_steps
from honing.train.trainer_bookkeeping import Bookkeeping
from honing.train.trainer_progress import Progress


class Metrics:
    """Recording, collecting and announcing metrics: steps come from ``progress``, reductions run in
    ``bookkeeping``'s thread on its group, ``emit`` hands logs to the callbacks, and ``last_checkpoint_step``
    tells a non-finite loss's error which checkpoint still holds finite weights."""

    def __init__(
        self,
        config: TrainerSection,
        *,
        progress: Progress,
        bookkeeping: Bookkeeping,
        emit: Callable[..., None],
        last_checkpoint_step: Callable[[], int | None],
    ):
        self.stop_on_nonfinite = config.nonfinite_loss == "stop"
        self._progress = progress
        self._bookkeeping = bookkeeping
        self._emit = emit
        self._last_checkpoint_step = last_checkpoint_step
        self.buffer = MetricsBuffer()  # the recorded values not yet collected, on device
        self._ce_losses: set[str] = set()  # metrics recorded as cross-entropy: they get a perplexity
        self.pending_logs: list[Future] = []  # reductions in flight, announced in order

    def record_metric(
        self,
        name: str,
        value: MetricValue,
        reduce_type: ReduceType | str | None = None,
        namespace: str | None = None,
        merge_strategy: MetricMergeStrategy | str = MetricMergeStrategy.warn,
    ) -> None:
        """Record a metric for the current step; tensors stay on device until collection. As in OLMo-core,
        ``reduce_type`` None means no reduction across ranks (rank 0 logs its own value), and a second value
        in the same step is merged by ``merge_strategy`` (``warn``: the first is kept, with a warning)."""
        if namespace:
            name = f"{namespace.rstrip('/')}/{name.lstrip('/')}"
        self.buffer.record(self._progress.global_step, name, value, reduce_type, merge_strategy)

    def record_ce_loss(self, value: MetricValue, reduce_type: ReduceType | str | None = None) -> None:
        """Record the training cross-entropy loss (``reduce_type`` None: not reduced, as OLMo-core's default;
        honing's train modules pass ``mean``); its perplexity is logged with it, computed from the loss once it
        is reduced, so the hot path pays for one metric."""
        self._ce_losses.add("train/loss")
        self.record_metric("train/loss", value, reduce_type)

    def log_samples(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Hand generated text (rows of the same keys) to the callbacks, e.g. as a W&B table."""
        self._emit("on_log_samples", self._progress.global_step, name, rows)

    def get_metric(
        self, name: str, namespace: str | int | None = None, *, step: int | None = None
    ) -> torch.Tensor | None:
        """A metric recorded this step (or at ``step``) that has not been collected yet; ``namespace`` prefixes
        ``name`` as in ``record_metric`` (OLMo-core's signature). An int in its place is the step (honing's
        earlier ``get_metric(name, step)``)."""
        if isinstance(namespace, int) and not isinstance(namespace, bool):
            namespace, step = None, namespace
        if namespace:
            name = f"{namespace.rstrip('/')}/{name.lstrip('/')}"
        return self.buffer.get(self._progress.global_step if step is None else step, name)

    def collect(self, *, wait: bool = False) -> None:
        """Collect the steps recorded so far, reduce them over ranks in the bookkeeping thread and announce what is
        reduced (all of it when ``wait``); a non-finite loss among them raises ``NonFiniteLossError``."""
        local, reduce_types = self.buffer.collect_local()
        bad_step = self._first_nonfinite_loss(local)
        if bad_step is not None:
            # the finite steps before it are still logged: nothing already measured is lost
            local = {step: values for step, values in local.items() if step < bad_step}
        group = self._bookkeeping.group
        if local and group is None:  # one process: nothing to reduce
            self._emit_logs(local)
        elif local:
            self.pending_logs.append(self._bookkeeping.run(reduce_steps, local, reduce_types, group))
        self.announce(wait=wait or bad_step is not None)
        if bad_step is not None:
            self._raise_nonfinite(bad_step)

    def _first_nonfinite_loss(self, steps: dict[int, dict[str, float]]) -> int | None:
        if not self.stop_on_nonfinite:
            return None
        return next((step for step in sorted(steps) if not math.isfinite(steps[step].get("train/loss", 0.0))), None)

    def check_loss_finite(self) -> None:
        """Raise ``NonFiniteLossError`` if a step not yet logged recorded a NaN or infinite ``train/loss``
        (one host sync); called before every checkpoint so broken weights are never saved."""
        if not self.stop_on_nonfinite:
            return
        pending = self.buffer.values_of("train/loss")
        if not pending:
            return
        values = torch.stack([torch.as_tensor(v, dtype=torch.float64).reshape(()).cpu() for _, v in pending])
        finite = torch.isfinite(values)
        if is_distributed():  # a rank's local loss may be the only broken one; all ranks must agree
            flags = finite.to(torch.int32)
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            finite = flags.bool()
        if not bool(finite.all()):
            self._raise_nonfinite(pending[int((~finite).nonzero()[0])][0])

    def _raise_nonfinite(self, step: int) -> None:
        last = self._last_checkpoint_step()
        saved = f"the last checkpoint (step {last}) holds finite weights" if last else "no checkpoint was saved"
        raise NonFiniteLossError(
            f"train/loss is not finite (NaN or inf) at step {step}: training stopped and nothing was saved after "
            f"it; {saved}. Lower optim.lr, check the data, or set trainer.nonfinite_loss=skip to skip such steps"
        )

    def announce(self, *, wait: bool = False) -> None:
        """Hand the reduced steps to the callbacks' ``on_log``, on the training thread (all of them when ``wait``)."""
        while self.pending_logs and (wait or self.pending_logs[0].done()):
            self._emit_logs(self.pending_logs.pop(0).result())

    def _emit_logs(self, steps: dict[int, dict[str, float]]) -> None:
        for step, metrics in steps.items():
            for name in self._ce_losses & metrics.keys():  # only a cross-entropy has a perplexity
                metrics[name.rsplit("/", 1)[0] + "/perplexity"] = math.exp(min(metrics[name], 50.0))
            self._emit("on_log", step, metrics)
