"""The callbacks OLMo-core's trainer adds when a script gives none of their kind: a console logger, a checkpointer
(so that a canceled or finished run saves), a speed monitor and a garbage collector, under OLMo-core's names and
with its intervals (a checkpoint every 250 steps, a collection every 1,000)."""

from __future__ import annotations

from typing import Any

from honing.train.callbacks.base import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.console import ConsoleCallback
from honing.train.callbacks.gc import GarbageCollectorCallback
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

#: OLMo-core's intervals for the callbacks it adds itself (its CheckpointerCallback's and GarbageCollectorCallback's)
CHECKPOINT_INTERVAL = 250
GC_INTERVAL = 1000


def default_callbacks(train_module: Any) -> dict[str, Callback]:
    """One callback of each kind OLMo-core's trainer adds, by the names it gives them (the console logs every
    ``metrics_collect_interval`` steps, as OLMo-core's)."""
    return {
        "console_logger": ConsoleCallback(),
        "checkpointer": CheckpointerCallback(save_interval=CHECKPOINT_INTERVAL),
        "speed_monitor": SpeedMonitorCallback(precision=getattr(train_module, "precision", "fp32")),
        "garbage_collector": GarbageCollectorCallback(interval=GC_INTERVAL),
    }


def with_default_callbacks(callbacks: dict[str, Callback], train_module: Any) -> dict[str, Callback]:
    """``callbacks`` plus each default whose kind (class) none of them is, nor takes its name."""
    given = list(callbacks.values())
    merged = dict(callbacks)
    for name, default in default_callbacks(train_module).items():
        if name not in merged and not any(isinstance(callback, type(default)) for callback in given):
            merged[name] = default
    return merged
