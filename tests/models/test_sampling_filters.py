"""honing's min-p and repetition-penalty filters equal transformers' own logits processors, and the sampler applies
them as transformers' generate does."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.generation.logits_process import MinPLogitsWarper, RepetitionPenaltyLogitsProcessor

from honing.models.generation import sample_completions
from honing.models.sampling_filters import min_p_filter, penalize_repeats, seen_tokens

VOCAB = 50


def random_logits(rows: int = 4) -> torch.Tensor:
    return 3 * torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(0))


def test_repetition_penalty_equals_transformers_processor():
    logits = random_logits()
    ids = torch.randint(0, VOCAB, (4, 12), generator=torch.Generator().manual_seed(1))
    for penalty in (1.3, 0.7):
        expected = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
        ours = penalize_repeats(logits, seen_tokens(ids, torch.ones_like(ids), VOCAB), penalty)
        assert torch.equal(ours, expected)
        assert not torch.equal(ours, logits)


def test_repetition_penalty_leaves_out_the_prompts_padding():
    ids, mask = torch.tensor([[7, 7, 3, 4]]), torch.tensor([[0, 0, 1, 1]])
    seen = seen_tokens(ids, mask, VOCAB)
    assert seen[0].nonzero().flatten().tolist() == [3, 4]


def test_min_p_equals_transformers_warper():
    logits = random_logits()
    logits[0, :10] = float("-inf")  # as top-k / top-p leave them
    for min_p in (0.0, 0.05, 0.3, 1.0):
        expected = MinPLogitsWarper(min_p)(None, logits.clone())
        assert torch.equal(min_p_filter(logits, min_p), expected)


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2
    )
    return AutoModelForCausalLM.from_config(config).eval()


def test_greedy_with_repetition_penalty_equals_transformers_generate():
    """The seen tokens grow with the completion: every step's penalty is transformers' over prompt + completion."""
    model, prompt = tiny_model(), torch.tensor([[5, 9, 5, 11, 2, 9]])
    common = dict(max_new_tokens=12, stop_token_ids=[], pad_token_id=0, seeds=[0], temperature=0.0)
    ours, _ = sample_completions(model, prompt, torch.ones_like(prompt), repetition_penalty=1.5, **common)
    plain, _ = sample_completions(model, prompt, torch.ones_like(prompt), **common)
    with torch.no_grad():
        expected = model.generate(prompt, do_sample=False, repetition_penalty=1.5, max_new_tokens=12, min_new_tokens=12)
    assert torch.equal(ours[0], expected[0, prompt.shape[1] :])
    assert not torch.equal(ours, plain)  # the penalty changed what was chosen


def test_min_p_one_keeps_only_the_most_likely_token():
    model, prompt = tiny_model(), torch.tensor([[5, 9, 5, 11], [3, 4, 8, 1]])
    common = dict(max_new_tokens=8, stop_token_ids=[], pad_token_id=0, seeds=[1, 2])
    greedy, _ = sample_completions(model, prompt, torch.ones_like(prompt), temperature=0.0, **common)
    floor, _ = sample_completions(model, prompt, torch.ones_like(prompt), temperature=1.0, min_p=1.0, **common)
    sampled, _ = sample_completions(model, prompt, torch.ones_like(prompt), temperature=1.0, **common)
    assert torch.equal(floor, greedy)
    assert not torch.equal(sampled, greedy)
