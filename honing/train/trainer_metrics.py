"""The Trainer's metrics: recorded on the hot path as device tensors, collected every ``metrics_collect_interval``
steps, reduced over ranks in the bookkeeping thread and announced to callbacks on the training thread; and the
``nonfinite_loss`` policy's check that a NaN or infinite loss stops the run before its weights are saved.
A part of ``Trainer``."""

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


class TrainerMetrics:
    """Recording, collecting and announcing metrics (the Trainer sets the attributes below)."""

    config: TrainerSection
    global_step: int
    _metrics: MetricsBuffer
    _ce_losses: set[str]  # metrics recorded as cross-entropy: they get a perplexity
    _metrics_group: Any  # the gloo group metrics are reduced on (None in one process)
    _pending_logs: list[Future]  # reductions in flight, announced in order
    _last_checkpoint_step: int | None
    _emit: Callable[..., None]
    run_bookkeeping_op: Callable[..., Future]

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
        self._metrics.record(self.global_step, name, value, reduce_type, merge_strategy)

    def record_ce_loss(self, value: MetricValue, reduce_type: ReduceType | str | None = None) -> None:
        """Record the training cross-entropy loss (``reduce_type`` None: not reduced, as OLMo-core's default;
        honing's train modules pass ``mean``); its perplexity is logged with it, computed from the loss once it
        is reduced, so the hot path pays for one metric."""
        self._ce_losses.add("train/loss")
        self.record_metric("train/loss", value, reduce_type)

    def log_samples(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Hand generated text (rows of the same keys) to the callbacks, e.g. as a W&B table."""
        self._emit("on_log_samples", self.global_step, name, rows)

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
        return self._metrics.get(self.global_step if step is None else step, name)

    def _log_metrics(self, *, wait: bool = False) -> None:
        local, reduce_types = self._metrics.collect_local()
        bad_step = self._first_nonfinite_loss(local)
        if bad_step is not None:
            # the finite steps before it are still logged: nothing already measured is lost
            local = {step: values for step, values in local.items() if step < bad_step}
        if local and self._metrics_group is None:  # one process: nothing to reduce
            self._emit_logs(local)
        elif local:
            self._pending_logs.append(self.run_bookkeeping_op(reduce_steps, local, reduce_types, self._metrics_group))
        self._announce_logs(wait=wait or bad_step is not None)
        if bad_step is not None:
            self._raise_nonfinite(bad_step)

    def _first_nonfinite_loss(self, steps: dict[int, dict[str, float]]) -> int | None:
        if self.config.nonfinite_loss != "stop":
            return None
        return next((step for step in sorted(steps) if not math.isfinite(steps[step].get("train/loss", 0.0))), None)

    def check_loss_finite(self) -> None:
        """Raise ``NonFiniteLossError`` if a step not yet logged recorded a NaN or infinite ``train/loss``
        (one host sync); called before every checkpoint so broken weights are never saved."""
        if self.config.nonfinite_loss != "stop":
            return
        pending = self._metrics.values_of("train/loss")
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
        last = self._last_checkpoint_step
        saved = f"the last checkpoint (step {last}) holds finite weights" if last else "no checkpoint was saved"
        raise NonFiniteLossError(
            f"train/loss is not finite (NaN or inf) at step {step}: training stopped and nothing was saved after "
            f"it; {saved}. Lower optim.lr, check the data, or set trainer.nonfinite_loss=skip to skip such steps"
        )

    def _announce_logs(self, *, wait: bool = False) -> None:
        # on_log runs on the training thread, once a step's reduction is done (at once when ``wait``)
        while self._pending_logs and (wait or self._pending_logs[0].done()):
            self._emit_logs(self._pending_logs.pop(0).result())

    def _emit_logs(self, steps: dict[int, dict[str, float]]) -> None:
        for step, metrics in steps.items():
            for name in self._ce_losses & metrics.keys():  # only a cross-entropy has a perplexity
                metrics[name.rsplit("/", 1)[0] + "/perplexity"] = math.exp(min(metrics[name], 50.0))
            self._emit("on_log", step, metrics)
