"""Metrics recorded on the hot path as tensors, reduced across ranks and merged only at collect time."""

from __future__ import annotations

import logging
from collections import defaultdict

import torch
import torch.distributed as dist

from honing.train.common import StrEnum

log = logging.getLogger(__name__)

MetricValue = torch.Tensor | float | int


class ReduceType(StrEnum):
    """How a metric is combined across ranks. Recording with ``reduce_type=None`` (OLMo-core's default)
    reduces nothing: every rank keeps its own value, and what rank 0 logs is rank 0's."""

    mean = "mean"
    sum = "sum"
    max = "max"
    l2_norm = "l2_norm"


class MetricMergeStrategy(StrEnum):
    """What to do when the same metric is recorded twice in one step (as OLMo-core): ``warn`` keeps the
    first value and warns, ``latest`` / ``oldest`` keep the last / first silently, the others combine them
    (``mean``, as OLMo-core's document says: the average of the new value with the last one, not a running mean)."""

    warn = "warn"
    latest = "latest"
    oldest = "oldest"
    mean = "mean"
    sum = "sum"
    max = "max"
    min = "min"


def merge_values(old: torch.Tensor, new: torch.Tensor, strategy: MetricMergeStrategy, count: int) -> torch.Tensor:
    """Combine a metric's earlier value with a new one (``count``: how many values were merged so far, unused by
    OLMo-core's strategies and kept for callers)."""
    if strategy == MetricMergeStrategy.latest:
        return new
    if strategy in (MetricMergeStrategy.oldest, MetricMergeStrategy.warn):
        return old
    if strategy == MetricMergeStrategy.mean:
        return (old + new) / 2
    if strategy == MetricMergeStrategy.sum:
        return old + new
    if strategy == MetricMergeStrategy.max:
        return torch.maximum(old, new)
    return torch.minimum(old, new)


def reduce_across_ranks(
    values: dict[str, float], reduce_types: dict[str, ReduceType | None], group: dist.ProcessGroup | None = None
) -> dict[str, float]:
    """Reduce each metric over ranks by its ReduceType (None: not reduced, this rank's value): one
    collective per type, not per metric."""
    return reduce_steps({0: values}, reduce_types, group).get(0, {})


def reduce_steps(
    steps: dict[int, dict[str, float]],
    reduce_types: dict[str, ReduceType | None],
    group: dist.ProcessGroup | None = None,
) -> dict[int, dict[str, float]]:
    """Reduce every step's metrics over ranks by their ReduceType, with one collective per type for
    all the steps together. Every rank must pass the same steps and names, except for metrics whose
    type is None (or missing): those are not reduced, and each rank keeps its own value."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return {step: dict(steps[step]) for step in sorted(steps)}
    world = dist.get_world_size(group)
    out: dict[int, dict[str, float]] = {step: {} for step in sorted(steps)}
    by_type: dict[ReduceType, list[tuple[int, str]]] = defaultdict(list)
    for step in sorted(steps):  # the same order on every rank
        for name in sorted(steps[step]):
            reduce_type = reduce_types.get(name)
            if reduce_type is None:
                out[step][name] = steps[step][name]
            else:
                by_type[ReduceType(reduce_type)].append((step, name))
    for reduce_type in ReduceType:
        keys = by_type.get(reduce_type, [])
        # every rank must take part in every collective, even with nothing to send
        tensor = torch.tensor([steps[step][name] for step, name in keys] or [0.0], dtype=torch.float64)
        if reduce_type == ReduceType.l2_norm:
            tensor = tensor.square()
        op = dist.ReduceOp.MAX if reduce_type == ReduceType.max else dist.ReduceOp.SUM
        dist.all_reduce(tensor, op=op, group=group)
        if reduce_type == ReduceType.mean:
            tensor = tensor / world
        elif reduce_type == ReduceType.l2_norm:
            tensor = tensor.sqrt()
        for (step, name), number in zip(keys, tensor.tolist()):
            out[step][name] = number
    return out


class MetricsBuffer:
    """Per-step metrics: tensors stay on their device and numbers stay Python numbers until
    ``collect`` moves every tensor to the host in one copy per device."""

    def __init__(self) -> None:
        self._values: dict[int, dict[str, MetricValue]] = defaultdict(dict)
        self._counts: dict[int, dict[str, int]] = defaultdict(dict)
        self.reduce_types: dict[str, ReduceType | None] = {}
        self._warned: set[str] = set()

    def record(
        self,
        step: int,
        name: str,
        value: MetricValue,
        reduce_type: ReduceType | str | None = None,
        merge_strategy: MetricMergeStrategy | str = MetricMergeStrategy.warn,
    ) -> None:
        """Add ``name`` for ``step``; a second value in the same step is merged by ``merge_strategy``.
        ``reduce_type`` None means no reduction across ranks; a metric keeps one reduce type throughout."""
        if isinstance(value, torch.Tensor):
            value = value.detach()
        if reduce_type is not None and not isinstance(reduce_type, ReduceType):
            reduce_type = ReduceType(reduce_type)
        if self.reduce_types.get(name, reduce_type) != reduce_type:
            raise RuntimeError(
                f"metric {name!r} was recorded with reduce_type "
                f"{_type_name(self.reduce_types[name])} before and {_type_name(reduce_type)} now; "
                "one metric needs one reduce type"
            )
        self.reduce_types[name] = reduce_type
        step_values = self._values[step]
        if name not in step_values:
            step_values[name] = value
            self._counts[step][name] = 1
            return
        strategy = MetricMergeStrategy(merge_strategy)
        if strategy == MetricMergeStrategy.warn and name not in self._warned:
            self._warned.add(name)
            log.warning(
                "metric %r was recorded twice in step %d; keeping the first value (pass merge_strategy to choose)",
                name,
                step,
            )
        count = self._counts[step][name]
        step_values[name] = merge_values(_as_tensor(step_values[name]), _as_tensor(value), strategy, count)
        self._counts[step][name] = count + 1

    def get(self, step: int, name: str) -> MetricValue | None:
        """The value recorded for ``name`` at ``step``, if any (not yet collected)."""
        return self._values.get(step, {}).get(name)

    def names_at(self, step: int) -> list[str]:
        """The names recorded for ``step`` that are not yet collected."""
        return list(self._values.get(step, {}))

    def values_of(self, name: str) -> list[tuple[int, MetricValue]]:
        """``(step, value)`` of every pending (not yet collected) step that recorded ``name``, oldest first."""
        return [(step, values[name]) for step, values in sorted(self._values.items()) if name in values]

    def collect_local(self) -> tuple[dict[int, dict[str, float]], dict[str, ReduceType | None]]:
        """Return and clear every pending step's metrics as this rank's floats, with the reduce types
        to pass to ``reduce_steps`` (which may then run off the training thread)."""
        local: dict[int, dict[str, float]] = defaultdict(dict)
        on_device: dict[torch.device, list[tuple[int, str, torch.Tensor]]] = defaultdict(list)
        for step in sorted(self._values):
            for name in sorted(self._values[step]):
                value = self._values[step][name]
                if isinstance(value, torch.Tensor):
                    on_device[value.device].append((step, name, value))
                else:
                    local[step][name] = float(value)
        for entries in on_device.values():
            # one device-to-host copy per device for all pending values, not one per metric
            host = torch.stack([t.reshape(()).double() for _, _, t in entries]).cpu().tolist()
            for (step, name, _), number in zip(entries, host):
                local[step][name] = number
        self._values.clear()
        self._counts.clear()
        return dict(local), dict(self.reduce_types)

    def collect(self, group: dist.ProcessGroup | None = None) -> dict[int, dict[str, float]]:
        """Return and clear every pending step's metrics as floats, reduced across ranks."""
        local, reduce_types = self.collect_local()
        return reduce_steps(local, reduce_types, group)


def _type_name(reduce_type: ReduceType | None) -> str:
    return "None (no reduction)" if reduce_type is None else repr(reduce_type.value)


def _as_tensor(value: MetricValue) -> torch.Tensor:
    return value.double() if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.float64)
