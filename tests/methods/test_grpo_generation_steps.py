"""``steps_per_generation``: one rollout batch cut into that many optimizer steps, every update clipped to the
log-probs of the policy that sampled, in TRL's and verl's order with ``num_iterations``."""

from __future__ import annotations

import copy

import torch

from tests.helpers import tiny_llama
from tests.methods.rollout_module import rollout_module

PAD, MAX_COMPLETION_LENGTH, TEMPERATURE = 0, 6, 0.7


def module(model, *, steps_per_generation=1, num_iterations=1, lr=0.05):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.param_groups[0]["initial_lr"] = lr  # as the run's scheduler sets it
    return rollout_module(
        model,
        optimizer,
        num_generations=4,
        max_completion_length=MAX_COMPLETION_LENGTH,
        temperature=TEMPERATURE,
        loss_type="grpo",
        num_iterations=num_iterations,
        steps_per_generation=steps_per_generation,
        micro_batch_size=1,
    )


def rollout_batch():
    """Two prompts' groups of 4: left-padded prompts, right-padded completions of different lengths."""
    generator = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(1, 64, (8, 5), generator=generator)
    prompt_mask = torch.ones_like(prompt_ids)
    for row, length in enumerate([3, 5, 2, 5, 4, 1, 5, 3]):
        prompt_mask[row, : 5 - length] = 0
    prompt_ids = prompt_ids * prompt_mask
    completion_ids = torch.randint(1, 64, (8, MAX_COMPLETION_LENGTH), generator=generator)
    completion_mask = torch.zeros_like(completion_ids)
    for row, length in enumerate([6, 1, 4, 6, 2, 5, 6, 3]):
        completion_mask[row, :length] = 1
    completion_ids = completion_ids * completion_mask
    advantages = torch.randn(8, generator=generator)
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }


def half(batch, index):
    return {key: value[index * 4 : (index + 1) * 4] for key, value in batch.items()}


def spied(train_module, calls):
    """Record (rows' completion ids, old log-probs, log-probs, optimizer steps so far) of every loss micro-batch."""
    loss, step = train_module.micro_loss, train_module.optimizer.step

    def micro_loss(micro, stats):
        calls.append(
            (
                micro["completion_ids"],
                micro["old_logps"],
                train_module.logps(train_module.model, micro).detach(),
                steps[0],
            )
        )
        return loss(micro, stats)

    steps = [0]

    def counted_step(*args, **kwargs):
        steps[0] += 1
        return step(*args, **kwargs)

    train_module.micro_loss = micro_loss
    train_module.optimizer.step = counted_step
    return steps


def part_of(batch, completion_ids):
    """Which half of ``batch`` (one prompt's group each) a micro-batch is."""
    return next(i for i in range(2) if torch.equal(half(batch, i)["completion_ids"], completion_ids))


def test_two_steps_per_generation_are_two_updates_clipped_to_the_sampling_policy():
    batch = rollout_batch()
    model = tiny_llama(seed=3)
    sampler = copy.deepcopy(model)  # the policy as it sampled
    train_module = module(model, steps_per_generation=2)
    calls = []
    steps = spied(train_module, calls)
    train_module.learn(batch)
    train_module.optim_step()  # the loop's, after train_batch
    assert steps[0] == 2  # one rollout batch, two optimizer steps
    assert [(part_of(batch, c[0]), c[3]) for c in calls] == [(0, 0), (1, 1)]  # the first half, then the second
    for completion_ids, old, now, updates in calls:
        sampled = train_module.logps(sampler, half(batch, part_of(batch, completion_ids)))
        assert torch.allclose(old, sampled, atol=1e-6)  # old log-probs: the sampling policy's
        assert torch.allclose(now, old, atol=1e-6) == (updates == 0)  # the second update's ratio is off 1


def test_the_first_update_is_a_step_on_the_first_part_alone():
    """loss_type grpo averages over the update's own sequences: part 1 of a cut batch is a one-step run on it."""
    batch = rollout_batch()
    cut, alone = tiny_llama(seed=3), tiny_llama(seed=3)
    first = module(cut, steps_per_generation=2)
    inner, after_first = first.optim_step, []  # the step between two updates (learn never takes the last)

    def snapshot():
        inner()
        after_first.append([p.detach().clone() for p in cut.parameters()])

    first.optim_step = snapshot
    first.learn(batch)
    reference = module(alone)
    reference.learn(half(batch, 0))
    reference.optim_step()
    assert all(torch.equal(a, b) for a, b in zip(after_first[0], alone.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(after_first[0], tiny_llama(seed=3).parameters()))


def test_num_iterations_pass_over_every_part_in_turn():
    batch = rollout_batch()
    train_module = module(tiny_llama(seed=3), steps_per_generation=2, num_iterations=2)
    calls = []
    spied(train_module, calls)
    train_module.learn(batch)
    # TRL's and verl's order, four updates: part 1, part 2, then both again
    assert [(part_of(batch, c[0]), c[3]) for c in calls] == [(0, 0), (1, 1), (0, 2), (1, 3)]
