"""Packed rows give the same loss through every attention path CPU can train with (eager, sdpa), and the same
as their documents alone: the per-document masks come from the restarting position_ids.

flex_attention is left to GPUs: on CPU (torch 2.14.1, transformers 5.23) it has no backward, compiles for
over a minute, and gave NaN for this very row (and another loss than sdpa without packing), so it is not a
path a CPU run should take."""

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from honing.losses import IGNORE_INDEX, cross_entropy_sum

LENGTHS = (7, 12, 5)


def model(attn_implementation: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation).eval()


def packed_row() -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    documents = [torch.randint(0, 64, (length,), generator=generator) for length in LENGTHS]
    ids = torch.cat(documents)[None]
    positions = torch.cat([torch.arange(len(document)) for document in documents])[None]
    labels = ids.clone()
    start = 0
    for document in documents:
        labels[0, start] = IGNORE_INDEX  # never predicted from the previous document
        start += len(document)
    return documents, ids, positions, labels


@torch.no_grad()
def test_every_attention_path_gives_the_documents_own_loss():
    documents, ids, positions, labels = packed_row()
    reference = model("sdpa")
    alone = 0.0
    for document in documents:
        doc_labels = document.clone()
        doc_labels[0] = IGNORE_INDEX
        alone += float(cross_entropy_sum(reference(input_ids=document[None], use_cache=False).logits, doc_labels[None]))
    losses = {}
    for implementation in ("eager", "sdpa"):
        logits = model(implementation)(input_ids=ids, position_ids=positions, use_cache=False).logits
        losses[implementation] = float(cross_entropy_sum(logits, labels))
    for implementation, loss in losses.items():
        assert loss == pytest.approx(alone, abs=1e-4), implementation
    # the control: without restarting positions the documents see each other and the loss changes
    crossed = float(cross_entropy_sum(reference(input_ids=ids, use_cache=False).logits, labels))
    assert abs(crossed - alone) > 1e-3
