"""A GRPO group of 4 spread over 2 gloo processes (``grpo.completions_per_rank: 2``, TRL's RepeatSampler layout):
both ranks hold the step's prompt, each samples its own 2 completions of it with its own seeds, and the
advantages each rank keeps are those of the whole group computed in one process; the logged reward is the group's."""

import json
import math

import pytest
import torch
import yaml

from honing.losses import group_advantages
from tests.distributed.runs import dumping_recipe, failure_excerpt, honing_train, metrics
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

STEPS = 2
RECIPE = '''
import json
import os

import torch.distributed as dist

from honing.recipes.grpo import GRPORecipe


class DumpsAdvantages(GRPORecipe):
    """GRPO that writes each rank's prompts, completions, rewards and advantages of every step to DUMP_DIR."""

    def build_train_module(self, inputs):
        module = super().build_train_module(inputs)
        sampler, score, seen = module.sampler, module.score_rollouts, {}
        groups = sampler.groups

        def recorded_groups(batch, step):
            sampled, counts = groups(batch, step)
            seen.update(prompts=sampled.prompts, texts=sampled.texts)
            return sampled, counts

        def recorded_score(rewards, rollouts, **options):
            advantages, std = score(rewards, rollouts, **options)
            row = {"rewards": rewards.tolist(), "advantages": advantages.tolist(), **seen}
            with open(os.path.join(os.environ["DUMP_DIR"], f"rank{dist.get_rank()}.jsonl"), "a") as out:
                out.write(json.dumps(row) + "\\n")
            return advantages, std

        sampler.groups, module.score_rollouts = recorded_groups, recorded_score
        return module
'''


def test_a_group_spanning_two_ranks_is_normalised_as_one_group(tmp_path, monkeypatch):
    dumping_recipe(tmp_path, monkeypatch, "dumps_advantages", RECIPE)
    raw = {
        "method": "grpo",
        "recipe": "dumps_advantages:DumpsAdvantages",
        "grpo": {
            "num_generations": 4,
            "completions_per_rank": 2,  # 2 x 2 ranks: one prompt per step, its group over both ranks
            "max_completion_length": 8,
            "temperature": 1.5,
            "rewards": [{"name": "varied_reward:flat_for_some"}],
        },
        "trainer": {
            "save_folder": str(tmp_path / "run"),
            "max_duration": f"{STEPS}steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {
            "train": {"sources": [{"path": "generated:reverse?samples=16&seed=0"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": dict(TINY_LLAMA_CONFIG)},
        "optim": {"lr": 1e-2},
        "callbacks": {"sample": {"enabled": False}, "console": {"plain": True}},
    }
    config = tmp_path / "span.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    ranks = [[json.loads(line) for line in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    logged = metrics(tmp_path / "run")
    assert [len(dumps) for dumps in ranks] == [STEPS, STEPS]
    for step, (mine, theirs) in enumerate(zip(*ranks), start=1):
        assert len(mine["rewards"]) == len(theirs["rewards"]) == 2  # each rank samples half of the group
        assert mine["prompts"] == theirs["prompts"] and mine["prompts"][0] == mine["prompts"][1]  # one prompt
        rewards = torch.tensor(mine["rewards"] + theirs["rewards"])
        whole, _ = group_advantages(rewards, 4, "group")  # the group in one process
        assert torch.allclose(torch.tensor(mine["advantages"] + theirs["advantages"]), whole)
        assert math.isclose(logged[step]["train/reward"], rewards.mean().item(), rel_tol=1e-6)
        assert logged[step]["train/frac_reward_zero_std"] == float(bool(rewards.std() == 0))
    # distinct seeds per (prompt, completion): the four completions of a step are not one sample repeated, and a
    # group's rewards differ, so its halves normalised alone would give other advantages than the whole's
    assert any(len({*mine["texts"], *theirs["texts"]}) > 1 for mine, theirs in zip(*ranks))
    assert any(torch.tensor(mine["rewards"] + theirs["rewards"]).std() > 0 for mine, theirs in zip(*ranks))
