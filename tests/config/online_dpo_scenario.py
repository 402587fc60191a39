"""``test_schema_walk``'s runs of ``method: online_dpo``: GRPO's first two runs with online DPO's section in place of
GRPO's, every key of it set (IPO and the EOS penalty with the rewards' own weights; then ``reward_weights`` and a
judge ranking the pairs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any


def first_is_better(prompts: list[Any], completions: list[list[str]]) -> list[int]:
    """A pairwise judge that always prefers the first completion."""
    return [0 for _ in prompts]


def online_dpo_runs(grpo: Callable[[Path], Iterator[dict[str, Any]]]) -> Callable[[Path], Iterator[dict[str, Any]]]:
    """The scenario over GRPO's: its plain-prompt run (LoRA) and its conversation run (full fine-tuning)."""

    def runs(tmp_path: Path) -> Iterator[dict[str, Any]]:
        for index, raw in enumerate(islice(grpo(tmp_path), 2)):
            grpo_section = raw["grpo"]
            section = {
                "max_new_tokens": grpo_section["max_completion_length"],
                "temperature": 0.9,
                "top_p": 0.95,
                "top_k": 20,
                "beta": 0.1,
                "sample_interval": 1,
                "validation": grpo_section.get("validation", {}),
            }
            if index == 0:
                section.update(loss_type="ipo", missing_eos_penalty=1.0, rewards=grpo_section["rewards"])
            else:
                names = [{"name": reward["name"]} for reward in grpo_section["rewards"]]
                section.update(loss_type="sigmoid", rewards=names, reward_weights=[1.0] * len(names))
                section["judge"] = "tests.config.online_dpo_scenario:first_is_better"
            yield {**{k: v for k, v in raw.items() if k != "grpo"}, "method": "online_dpo", "online_dpo": section}

    return runs
