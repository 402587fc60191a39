"""The recomputation ladder of ``parallel.activation_checkpointing: auto``: the least checkpointing whose planned
peak fits a memory budget (``honing.plan.auto_checkpointing`` applies it to a run; ``honing plan`` to a budget)."""

from __future__ import annotations

from dataclasses import replace

from honing.plan.estimate import MemoryEstimate, PlanInputs, estimate

AUTO = "auto"
#: the share of the device's memory a planned peak may take (the allocator's fragmentation and the plan's error)
HEADROOM = 0.9
#: the candidates, least recomputation first: (mode, every N-th block)
LADDER = (("none", 2), ("every_n", 2), ("full", 2))


def checkpointing_for_budget(plan: PlanInputs, budget: int) -> tuple[str, int, MemoryEstimate]:
    """The least recomputation whose planned peak fits ``HEADROOM`` of ``budget`` bytes (``full`` when none does),
    with its estimate."""
    for mode, every in LADDER:
        result = estimate(replace(plan, activation_checkpointing=mode, checkpointing_every=every))
        if result.peak <= HEADROOM * budget:
            return mode, every, result
    return "full", LADDER[-1][1], result
