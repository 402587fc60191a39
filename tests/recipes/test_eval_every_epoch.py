"""``callbacks.evaluator.every_epoch`` through a run's config (transformers' ``eval_strategy: epoch``, Oumi's halloumi
recipe): the validation loss at each epoch's last step, not every ``interval`` steps."""

from __future__ import annotations

import json

from honing.recipes import recipe_for
from tests.recipes.test_sft import sft_config


def test_a_two_epoch_run_evaluates_at_each_epochs_last_step(tmp_path):
    config = sft_config(
        tmp_path,
        trainer={"max_duration": "2epochs"},
        data={"train": {"sources": [{"path": "generated:reverse?samples=24&seed=0"}]}},
        callbacks={"evaluator": {"interval": 1, "every_epoch": True}, "checkpointer": {"save_interval": 100}},
    )
    recipe_for(config).run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = sorted({row["step"] for row in rows if "train/loss" in row})
    evaluated = [row["step"] for row in rows if "eval/loss" in row]
    last = steps[-1]
    assert last % 2 == 0 and last >= 4  # two epochs of a few steps each
    assert evaluated == [last // 2, last]  # interval 1 is unused
