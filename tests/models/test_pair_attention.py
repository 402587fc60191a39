"""Pairs packed into one row under the pair attention score exactly as in padded rows under the dense 4D mask."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from honing.data.preference.batches import PairCollator
from honing.methods.pairs import pair_scores
from honing.models.pair_attention import enable_pair_attention

SHAPE = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2, max_position_embeddings=96)


def build(attention: str = "sdpa", **extra) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", **SHAPE, num_attention_heads=4, num_key_value_heads=2, **extra)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention).double()


def pairs_batch(count: int = 5) -> tuple[PairCollator, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)

    def ids(low: int, high: int) -> list[int]:
        length = int(torch.randint(low, high, (1,), generator=generator))
        return torch.randint(1, 60, (length,), generator=generator).tolist()

    items = [{"prompt_ids": ids(1, 12), "chosen_ids": ids(1, 9), "rejected_ids": ids(1, 9)} for _ in range(count)]
    collator = PairCollator(0)
    return collator, collator(items)


def scores_and_grads(model, collator, batch, *, packed, chunked=True):
    model.zero_grad()
    logps, lengths, _ = pair_scores(model, batch, collator, chunked=chunked, packed=packed)
    (logps * torch.linspace(0.5, 1.5, logps.numel(), dtype=logps.dtype).view_as(logps)).sum().backward()
    return logps.detach(), lengths, torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("chunked", [True, False])
def test_packed_pairs_equal_the_dense_mask(attention, chunked):
    collator, batch = pairs_batch()
    assert batch["input_ids"].shape[1] > int(batch["segments"].sum(1).min())  # some rows are padded
    dense_model = build(attention)
    dense_collator = PairCollator(0, additive_mask=attention == "eager")
    dense = scores_and_grads(dense_model, dense_collator, batch, packed=False, chunked=chunked)
    packed_model = copy.deepcopy(dense_model)
    assert enable_pair_attention(packed_model)
    packed = scores_and_grads(packed_model, collator, batch, packed=True, chunked=chunked)
    # float64 throughout, except that transformers' eager attention takes its softmax in float32
    tolerance = dict(rtol=0, atol=1e-10) if attention == "sdpa" else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(packed[0], dense[0], **tolerance)
    assert torch.equal(packed[1], dense[1])
    torch.testing.assert_close(packed[2], dense[2], **tolerance)


def test_activation_checkpointing_recomputes_the_pair_attention():
    collator, batch = pairs_batch()
    model = build()
    assert enable_pair_attention(model)
    plain = scores_and_grads(model, collator, batch, packed=True)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    checkpointed = scores_and_grads(model, collator, batch, packed=True)
    torch.testing.assert_close(checkpointed[2], plain[2], rtol=0, atol=1e-10)


def test_other_forwards_are_unchanged():
    model = build()
    ids = torch.randint(1, 60, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask).logits
        assert enable_pair_attention(model)
        after = model(input_ids=ids, attention_mask=mask).logits
        generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    assert torch.equal(before, after)
    assert generated.shape == (2, 10)


def test_flash_attention_keeps_the_dense_path():
    model = build()
    model.config._attn_implementation = "flash_attention_2"
    assert not enable_pair_attention(model)
