"""Held-out prompts under ``grpo.completions_per_rank`` on 2 gloo processes: each rank answers its own share of them
(none twice, none left out), and the greedy validation's metrics, reduced over the ranks, are the one-process run's
exactly (integer rewards and lengths: every sum is exact whatever the order it is added in)."""

import json

import pytest
import yaml

from tests.distributed.runs import dumping_recipe, failure_excerpt, honing_train, metrics
from tests.recipes.test_grpo_groups_span_ranks import in_completions

pytestmark = pytest.mark.slow

HELD_OUT = 5  # an odd count in batches of 2: the last batch is short and one rank pads with a filler batch
RECIPE = '''
import json
import os

import torch.distributed as dist

from honing.recipes.grpo import GRPORecipe


class DumpsHeldOut(GRPORecipe):
    """GRPO that writes the held-out prompt indices each rank answers (a filler batch marked) to DUMP_DIR."""

    def build_train_module(self, inputs):
        module = super().build_train_module(inputs)
        answer = module.eval_batch
        rank = dist.get_rank() if dist.is_initialized() else 0

        def recorded(batch):
            row = {"index": batch["index"].tolist(), "filler": bool(batch.get("filler"))}
            with open(os.path.join(os.environ["DUMP_DIR"], f"{os.environ['RUN']}_rank{rank}.jsonl"), "a") as out:
                out.write(json.dumps(row) + "\\n")
            return answer(batch)

        module.eval_batch = recorded
        return module
'''


def run_config(tmp_path, name, completions_per_rank):
    """The tiny GRPO run whose held-out prompts are answered greedily (the defaults) before its one step."""
    raw = in_completions(
        tmp_path / name,
        completions_per_rank=completions_per_rank,  # groups of 4: one prompt a step, its group over the ranks
        max_completion_length=8,
        rewards=[{"name": "varied_reward:flat_for_some"}],
        validation={"before_training": True},
    )
    raw["recipe"] = "dumps_held_out:DumpsHeldOut"
    raw["trainer"]["max_duration"] = "1steps"
    raw["data"]["validation"] = {"sources": [{"path": f"generated:reverse?samples={HELD_OUT}&seed=1"}]}
    raw["callbacks"]["evaluator"] = {"batch_size": 2}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def answered(tmp_path, run, ranks):
    """Each rank's answered held-out prompt indices at the evaluation before training (filler batches left out)."""
    out = []
    for rank in range(ranks):
        rows = [json.loads(line) for line in (tmp_path / f"{run}_rank{rank}.jsonl").read_text().splitlines()]
        first = rows[: len(rows) // 2]  # two evaluations, each the same batches: before training and after step 1
        out.append(sorted(i for row in first if not row["filler"] for i in row["index"]))
    return out


def test_each_rank_answers_its_share_of_the_held_out_prompts_and_the_metrics_are_one_process(tmp_path, monkeypatch):
    dumping_recipe(tmp_path, monkeypatch, "dumps_held_out", RECIPE)
    monkeypatch.setenv("RUN", "two")
    two = honing_train(run_config(tmp_path, "two", completions_per_rank=2), nproc=2, timeout=300)
    assert two.returncode == 0, failure_excerpt(two.stderr)
    monkeypatch.setenv("RUN", "one")
    one = honing_train(run_config(tmp_path, "one", completions_per_rank=4), timeout=300)
    assert one.returncode == 0, failure_excerpt(one.stderr)
    shares = answered(tmp_path, "two", 2)
    assert sorted(shares[0] + shares[1]) == answered(tmp_path, "one", 1)[0] == list(range(HELD_OUT))
    assert not set(shares[0]) & set(shares[1])  # no prompt answered twice
    before = {
        run: {k: v for k, v in metrics(tmp_path / run / "run")[0].items() if k.startswith("eval/")}
        for run in ("one", "two")
    }
    assert before["one"]["eval/completions/mean_length"] > 0 and before["one"]["eval/reward_std"] > 0  # not trivial
    assert before["two"] == before["one"]
