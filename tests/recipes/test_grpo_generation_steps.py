"""``grpo.steps_per_generation`` end to end: one sampling per trainer step and that many optimizer steps, a run
stopped at an odd step resumed to the same weights, and a batch it does not divide refused at launch in one line."""

from __future__ import annotations

import pytest
import torch

from honing.config import validate
from honing.errors import ConfigError
from honing.methods import grpo as grpo_module
from honing.methods.grpo_rollouts import GroupSampler
from honing.recipes.grpo import GRPORecipe
from tests.recipes.test_grpo import grpo_raw, read_jsonl


def raw_for(tmp_path, name, **trainer):
    raw = grpo_raw(tmp_path / name, steps_per_generation=2, beta=0.05)  # 2 prompts per step: 1 per update
    raw["trainer"].update(trainer)
    return raw


def test_sampling_once_per_step_two_updates_and_an_exact_resume_at_an_odd_step(tmp_path, monkeypatch):
    counts = {"generate": 0, "inner": 0}
    generate, inner = GroupSampler.generate, grpo_module.unrecorded_optim_step

    def counted(name, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(GroupSampler, "generate", counted("generate", generate))
    monkeypatch.setattr(grpo_module, "unrecorded_optim_step", counted("inner", inner))
    straight = GRPORecipe(validate(raw_for(tmp_path, "straight")))
    assert straight.run().global_step == 3
    assert counts == {"generate": 3, "inner": 3}  # a sampling per step, and an update besides the loop's
    stopped = GRPORecipe(validate(raw_for(tmp_path, "resumed", hard_stop="1steps")))
    assert stopped.run().global_step == 1
    resumed = GRPORecipe(validate(raw_for(tmp_path, "resumed")))
    assert resumed.run().global_step == 3
    assert [row["step"] for row in read_jsonl(tmp_path / "resumed" / "run" / "metrics.jsonl")] == [1, 2, 3]
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(left[name], right[name]) for name in left)


def test_a_rank_batch_it_does_not_divide_is_one_line_at_launch(tmp_path):
    raw = grpo_raw(tmp_path, steps_per_generation=4)  # 2 prompts per step
    config = validate(raw)  # the data-parallel size is not known before launch
    with pytest.raises(ConfigError, match=r"^grpo.steps_per_generation \(4\) must divide the prompts of each rank's"):
        GRPORecipe(config).run()


def test_micro_batches_of_completions_span_groups_and_train_like_whole_groups(tmp_path):
    """``grpo.micro_batch_completions`` 2 (each group of 4 over two passes) trains to the weights of whole groups
    for a loss normalised over the step's tokens (dapo); one that does not divide a step's completions is refused."""
    whole = GRPORecipe(validate(grpo_raw(tmp_path / "whole", beta=0.0)))
    whole.run()
    halves = GRPORecipe(validate(grpo_raw(tmp_path / "halves", beta=0.0, micro_batch_completions=2)))
    halves.run()
    assert halves.train_module.logps.micro_width == 2 and whole.train_module.logps.micro_width == 4
    left, right = whole.model.state_dict(), halves.model.state_dict()
    assert all(torch.allclose(left[name], right[name], atol=1e-6) for name in left)
    refused = validate(grpo_raw(tmp_path / "refused", micro_batch_completions=3))  # 2 prompts x 4 = 8 per step
    with pytest.raises(ConfigError, match=r"^grpo.micro_batch_completions \(3\) must divide each optimizer step's"):
        GRPORecipe(refused).run()
