"""Oumi's ``training.profiler`` (a ``torch.profiler`` trace) as honing's ``callbacks.profiler``, and
``training.telemetry`` (Oumi's own timers), which honing's speed monitor makes moot. Both sections are walked key
by key against their rows in ``oumi_table``: a key set that the table calls moot gets a note, a refused one a
refusal, a key Oumi's dataclass does not have a refusal naming it."""

from __future__ import annotations

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.oumi_table import OUMI, TABLE
from honing.interop.configs.schema_table import finish
from honing.interop.configs.translation import Keys, Translation

KEYS = key_table("oumi").keys


def translate_profiler(t: Translation, training: Keys) -> None:
    """``training.profiler``: CPU or CUDA profiling over the schedule's active steps → ``callbacks.profiler``."""
    profiler = t.section(training.take("profiler"), "training.profiler")
    schedule = t.section(profiler.take("schedule"), "training.profiler.schedule")
    enabled = bool(profiler.take("enable_cpu_profiling")) | bool(profiler.take("enable_cuda_profiling"))
    with_schedule = bool(schedule.take("enable_schedule"))
    window = {name: schedule.number(name, int, default) for name, default in SCHEDULE_DEFAULTS.items()}
    if enabled and with_schedule:
        # torch.profiler.schedule: skip_first, then wait, warmup and active steps; the active ones are recorded
        start = window["skip_first"] + window["wait"] + window["warmup"] + 1
        t.set("callbacks.profiler.enabled", True)
        t.set("callbacks.profiler.start", start)
        t.set("callbacks.profiler.stop", start + max(1, window["active"]) - 1)
        if window["repeat"] != 1:
            t.refuse(
                schedule.key("repeat"),
                f"{window['repeat']}: honing traces one window of steps (callbacks.profiler.start..stop); set 1",
            )
    elif enabled:
        t.refuse(
            "training.profiler",
            "profiling the whole run (schedule.enable_schedule false) is not available: honing traces a window of "
            "steps; set schedule.enable_schedule with wait / warmup / active",
        )
    finish(schedule, TABLE["training.profiler.schedule"], KEYS["training.profiler.schedule"], OUMI)
    finish(profiler, TABLE["training.profiler"], KEYS["training.profiler"], OUMI)


def translate_telemetry(t: Translation, training: Keys) -> None:
    """``training.telemetry``: Oumi's timers and GPU temperature log, each key noted (honing's speed monitor)."""
    telemetry = t.section(training.take("telemetry"), "training.telemetry")
    finish(telemetry, TABLE["training.telemetry"], KEYS["training.telemetry"], OUMI)


# ProfilerScheduleParams' defaults
SCHEDULE_DEFAULTS = {"skip_first": 1, "wait": 0, "warmup": 1, "active": 3, "repeat": 1}
