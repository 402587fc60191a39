"""The lean decoder's shared prefix: columns every row holds alike, computed once, give the logits that the same
rows give when transformers' forward runs every row whole (padding between the prefix and each row's own part)."""

from __future__ import annotations

import pytest
import torch

from honing.models.generation import TransformersDecoder
from honing.models.lean_decoder import lean_decoder
from tests.models.test_lean_decoder import build

SHARED = 5


def prefix_then_padded_rows(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows: the same 5 tokens, then each row's own 2 to 6 tokens, left-padded after the shared part."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, vocab, (3, SHARED + 6), generator=generator)
    ids[:, :SHARED] = ids[0, :SHARED]
    mask = torch.ones_like(ids)
    mask[0, SHARED : SHARED + 4] = 0  # row 0's own part is 2 tokens, row 2's is 5
    mask[2, SHARED : SHARED + 1] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("name", ["llama-gqa", "qwen3"])
def test_a_shared_prefix_gives_the_whole_forward_logits_at_every_step(name):
    model = build(name)
    ids, mask = prefix_then_padded_rows(model.config.vocab_size)
    lean, reference = lean_decoder(model), TransformersDecoder(model)
    feed = torch.randint(3, model.config.vocab_size, (4, 3), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours, theirs = [lean.prefill(ids, mask, 4, shared_prefix=SHARED)], [reference.prefill(ids, mask, 4)]
        for tokens in feed:
            ours.append(lean.step(tokens))
            theirs.append(reference.step(tokens))
    for step, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"{name}: step {step}")
    assert torch.equal(lean.keys[0][1, :, :SHARED], lean.keys[0][0, :, :SHARED])  # copied from row 0
