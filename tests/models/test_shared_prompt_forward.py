"""The shared-prompt forward gives the transformers forward's completion logits and gradients (to float32 rounding)
for every architecture it takes, with each group's prompt computed once, and declines what it cannot serve."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from honing.models.shared_prompt_forward import prompt_groups, shared_prompt_forward
from tests.models.lora_fixtures import trained_lora_model
from tests.models.test_lean_decoder import ARCHITECTURES, build

GROUP = 3  # completions per prompt


def grouped_rows(vocab: int, prompts: int = 2, prompt_width: int = 7, completion_width: int = 5):
    """GRPO's rollout layout: left-padded prompts, each repeated GROUP times, then right-padded completions."""
    generator = torch.Generator().manual_seed(3)
    prompt_ids = torch.randint(3, vocab, (prompts, prompt_width), generator=generator)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :3] = 0  # prompts of different lengths
    rows = prompts * GROUP
    completion_ids = torch.randint(3, vocab, (rows, completion_width), generator=generator)
    completion_mask = torch.ones_like(completion_ids)
    for row in range(rows):  # completions that end at different lengths, padded after
        completion_mask[row, 1 + row % completion_width :] = 0
    ids = torch.cat([prompt_ids.masked_fill(prompt_mask == 0, 0).repeat_interleave(GROUP, 0), completion_ids], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(GROUP, 0), completion_mask], 1)
    # the kept logits' real positions: the last prompt column's (predicts the first completion token) and each
    # completion token's but the last
    kept = torch.cat([torch.ones(rows, 1, dtype=torch.bool), completion_mask.bool()], 1)
    return ids, mask, completion_width, kept


def plain_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, width: int) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=width + 1).logits


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_logits_and_gradients_match_the_transformers_forward(name):
    model = build(name).train()
    ids, mask, width, kept = grouped_rows(model.config.vocab_size)
    target = torch.randint(0, model.config.vocab_size, kept.shape, generator=torch.Generator().manual_seed(4))

    def logits_and_grads(forward):
        model.zero_grad()
        logits = forward()
        loss = (logits.log_softmax(-1).gather(-1, target[..., None])[..., 0] * kept).sum()
        loss.backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    shared = shared_prompt_forward(model, ids, mask, width)
    assert shared is not None
    plain, plain_grads = logits_and_grads(lambda: plain_logits(model, ids, mask, width))
    logits, grads = logits_and_grads(lambda: shared_prompt_forward(model, ids, mask, width).logits)
    assert logits.shape == plain.shape
    assert (logits - plain)[kept].abs().max() < 1e-5
    for parameter_name, grad in plain_grads.items():
        difference = (grads[parameter_name] - grad).abs().max() / grad.abs().max().clamp_min(1e-8)
        assert difference < 1e-4, parameter_name


def test_each_prompt_goes_through_the_layers_once():
    model = build("llama").eval()
    ids, mask, width, _ = grouped_rows(model.config.vocab_size)
    rows_seen: list[int] = []
    handle = model.model.layers[0].mlp.register_forward_hook(lambda m, args, out: rows_seen.append(args[0].shape[0]))
    try:
        with torch.no_grad():
            shared_prompt_forward(model, ids, mask, width)
    finally:
        handle.remove()
    assert rows_seen == [2, 2 * GROUP]  # the two distinct prompts, then every completion


def test_lora_adapters_are_applied():
    model = trained_lora_model()
    ids, mask, width, kept = grouped_rows(model.config.vocab_size)
    with torch.no_grad():
        shared = shared_prompt_forward(model, ids, mask, width)
        plain = plain_logits(model, ids, mask, width)
        with model.disable_adapter():
            without_adapters = plain_logits(model, ids, mask, width)
    assert shared is not None
    assert (shared.logits - plain)[kept].abs().max() < 1e-5
    assert (shared.logits - without_adapters)[kept].abs().max() > 1e-3  # the adapters changed the logits


def test_less_arithmetic_than_the_plain_forward():
    model = build("llama").train()
    ids, mask, width, _ = grouped_rows(model.config.vocab_size, prompt_width=40, completion_width=8)

    def flops(forward) -> int:
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            forward().float().logsumexp(-1).sum().backward()
        return sum(event.flops for event in prof.key_averages())

    plain = flops(lambda: plain_logits(model, ids, mask, width))
    shared = flops(lambda: shared_prompt_forward(model, ids, mask, width).logits)
    # 6 rows of 48 columns against 2 prompts of 40 and 6 completions of 8: about a third of the tokens
    assert shared < 0.5 * plain


def test_prompt_groups_are_runs_of_equal_rows():
    ids = torch.tensor([[1, 2], [1, 2], [3, 4], [3, 4], [3, 4], [1, 2]])
    mask = torch.ones_like(ids)
    group_of_row, first_rows = prompt_groups(ids, mask)
    assert group_of_row.tolist() == [0, 0, 1, 1, 1, 2]  # a prompt that comes back later is its own run
    assert first_rows.tolist() == [0, 2, 5]
    assert prompt_groups(ids[[0, 2, 5]], mask[:3]) is None  # no neighbours alike: nothing to share
    padded = mask.clone()
    padded[1, 0] = 0  # the same ids under another mask are another prompt
    assert prompt_groups(ids, padded)[0].tolist() == [0, 1, 2, 2, 2, 3]


def test_declines_what_it_cannot_serve_exactly():
    ids, mask, width, _ = grouped_rows(97)
    model = build("llama").train()
    assert shared_prompt_forward(model, ids[::GROUP], mask[::GROUP], width) is None  # no shared prompts
    handle = model.model.layers[1].register_forward_hook(lambda *args: None)
    assert shared_prompt_forward(model, ids, mask, width) is None  # a hook on a layer would be skipped
    handle.remove()
    model.gradient_checkpointing_enable()
    assert shared_prompt_forward(model, ids, mask, width) is None
    model.gradient_checkpointing_disable()
    model.config.attention_dropout = 0.1
    assert shared_prompt_forward(model, ids, mask, width) is None  # dropout in training
    assert shared_prompt_forward(model.eval(), ids, mask, width) is not None  # evaluation has none
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=32, n_layer=1, n_head=2))
    assert shared_prompt_forward(gpt2, ids, mask, width) is None  # not a Llama-shaped layer
