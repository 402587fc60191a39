"""``grpo.completions_per_rank``: in one process it is the step's prompts x num_generations (the same losses as
``data.global_batch_size`` in prompts), and a batch the real world size does not split into whole groups is
refused at launch in one line naming the keys and the numbers."""

from __future__ import annotations

import pytest

from honing.config import validate
from honing.errors import ConfigError
from honing.parallel_dims import ParallelDims
from honing.plan.rollout_batch import shared_groups
from honing.recipes.grpo import GRPORecipe
from tests.recipes.test_grpo import grpo_raw, read_jsonl


def in_completions(tmp_path, **grpo):
    """The tiny GRPO run with its batch given as completions per rank (no data batch keys)."""
    raw = grpo_raw(tmp_path, **grpo)
    del raw["data"]["global_batch_size"], raw["data"]["micro_batch_size"]
    return raw


def test_completions_per_rank_in_one_process_trains_like_the_same_prompts_per_step(tmp_path):
    prompts = grpo_raw(tmp_path / "prompts")
    prompts["data"].update(global_batch_size=1, micro_batch_size=1)
    GRPORecipe(validate(prompts)).run()
    GRPORecipe(validate(in_completions(tmp_path / "completions", completions_per_rank=4))).run()
    left = read_jsonl(tmp_path / "prompts" / "run" / "metrics.jsonl")
    right = read_jsonl(tmp_path / "completions" / "run" / "metrics.jsonl")
    assert [row["train/loss"] for row in left] == [row["train/loss"] for row in right]
    assert [row["train/reward"] for row in left] == [row["train/reward"] for row in right]


def test_a_step_that_is_not_whole_groups_on_the_real_world_size_is_one_line(tmp_path):
    config = validate(in_completions(tmp_path, completions_per_rank=3))  # 3 x 2 ranks = 6, groups of 4
    section = config.grpo
    assert shared_groups(config, section, ParallelDims(world_size=4)).prompts == 3  # 12 completions: 3 groups
    with pytest.raises(ConfigError) as refused:
        shared_groups(config, section, ParallelDims(world_size=2))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "grpo.completions_per_rank (3) x 2 data-parallel ranks = 6 completions per step is not a multiple of "
        "grpo.num_generations (4); set grpo.completions_per_rank to a multiple of 2"
    )


def test_completions_per_rank_beside_a_data_batch_key_is_one_line(tmp_path):
    config = validate(grpo_raw(tmp_path, completions_per_rank=2))  # global_batch_size and micro_batch_size given
    with pytest.raises(ConfigError, match=r"^grpo.completions_per_rank \(2\) gives the step's batch in completions: "):
        shared_groups(config, config.grpo, ParallelDims(world_size=2))


def test_a_group_spanning_ranks_refuses_dynamic_sampling_in_one_line(tmp_path):
    config = validate(in_completions(tmp_path, completions_per_rank=2, filter_groups={"enable": True}))
    with pytest.raises(ConfigError, match=r"lets a group span ranks, which grpo.filter_groups.enable"):
        shared_groups(config, config.grpo, ParallelDims(world_size=2))
