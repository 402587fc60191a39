"""The sampler's Gumbel noise, drawn in blocks of tokens, is bit for bit the noise drawn token by token from each
row's own generator, so block drawing leaves every seeded completion as it was."""

from __future__ import annotations

import torch

from honing.models.generation import GumbelNoise, sample_completions
from tests.models.test_lean_decoder import build, left_padded_prompts


def token_by_token(seeds: list[int], tokens: int, vocab: int) -> torch.Tensor:
    """``[tokens, rows, vocab]``: one ``rand(vocab)`` per row and token, the draw a per-token sampler makes."""
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    steps = [torch.stack([torch.rand(vocab, generator=g) for g in generators]) for _ in range(tokens)]
    return -torch.log(-torch.log(torch.stack(steps).clamp(min=1e-20)))


def test_block_noise_is_the_token_by_token_noise():
    seeds, tokens, vocab = [3, 11, 5], 40, 97  # 40 tokens: blocks of 8, 16 and a last one cut to what is left
    noise = GumbelNoise(seeds, torch.device("cpu"), max_tokens=tokens)
    drawn = torch.stack([noise.next(vocab) for _ in range(tokens)])
    assert torch.equal(drawn, token_by_token(seeds, tokens, vocab))


def test_blocks_hold_at_most_block_floats(monkeypatch):
    monkeypatch.setattr(GumbelNoise, "BLOCK_FLOATS", 2 * 97 * 3)  # two tokens of three rows
    noise = GumbelNoise([1, 2, 3], torch.device("cpu"), max_tokens=9)
    drawn = [noise.next(97)]
    assert noise.gumbel.shape == (3, 2, 97)
    drawn += [noise.next(97) for _ in range(8)]
    assert torch.equal(torch.stack(drawn), token_by_token([1, 2, 3], 9, 97))


def test_completions_are_the_argmax_of_logits_plus_token_by_token_noise():
    model = build("llama")
    ids, mask = left_padded_prompts(model.config.vocab_size)
    seeds, steps = [7, 8, 9], 10
    completions, _ = sample_completions(
        model, ids, mask, max_new_tokens=steps, stop_token_ids=[], pad_token_id=0, seeds=seeds
    )
    noise = token_by_token(seeds, steps, model.config.vocab_size)
    expected, fed = [], ids.clone()  # the plain forward over the growing sequence, one token at a time
    with torch.no_grad():
        for step in range(steps):
            attention = torch.cat([mask, torch.ones(3, step, dtype=mask.dtype)], 1)
            positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 1)  # real tokens counted, as generate
            logits = model(input_ids=fed, attention_mask=attention, position_ids=positions).logits[:, -1]
            expected.append((logits + noise[step]).argmax(-1))
            fed = torch.cat([fed, expected[-1][:, None]], 1)
    assert torch.equal(completions, torch.stack(expected, 1))
