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


def packed_rows(width: int = 24, rows: int = 3) -> list[dict[str, torch.Tensor]]:
    """Rows of documents with restarting position_ids, as PackedDataset makes them (a row's first label included)."""
    generator = torch.Generator().manual_seed(2)
    items = []
    for row in range(rows):
        lengths = [7 + row, 10, width - 17 - row]
        ids = torch.randint(0, 64, (width,), generator=generator)
        labels = ids.clone()
        positions = torch.cat([torch.arange(length) for length in lengths])
        labels[(positions == 0).nonzero().flatten()[1:]] = IGNORE_INDEX
        items.append({"input_ids": ids, "labels": labels, "position_ids": positions, "num_real_tokens": width})
    return items


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_rows_laid_end_to_end_for_varlen_kernels_train_exactly_as_stacked_rows(implementation):
    """VarlenCollator gives flash attention its one-row micro-batches; through the per-document masks CPU has,
    the loss, the target count and every gradient equal those of the stacked rows."""
    from honing.data.collate import VarlenCollator, stack_collate
    from honing.losses import count_target_tokens

    batch = stack_collate(packed_rows())
    results = []
    for collator in (stack_collate, VarlenCollator()):
        net = model(implementation).double()
        (micro,) = collator.split(batch, 3)
        logits = net(**collator.model_inputs(micro), use_cache=False).logits
        loss = cross_entropy_sum(logits, micro["labels"])
        loss.backward()
        grads = [p.grad.clone() for p in net.parameters()]
        results.append((micro["input_ids"].shape, float(loss), int(count_target_tokens(micro["labels"])), grads))
    stacked_shape, stacked_loss, stacked_count, stacked_grads = results[0]
    flat_shape, flat_loss, flat_count, flat_grads = results[1]
    assert tuple(stacked_shape) == (3, 24) and tuple(flat_shape) == (1, 72)
    assert flat_count == stacked_count
    assert flat_loss == pytest.approx(stacked_loss, rel=1e-12)
    for stacked, flat in zip(stacked_grads, flat_grads):
        torch.testing.assert_close(flat, stacked, rtol=1e-9, atol=1e-12)
    # the control: laid end to end without dropping each row's first label, a row's last token would be trained
    # to predict the next row's first one
    flat_all = batch["labels"].reshape(1, -1)
    assert int(count_target_tokens(flat_all)) == stacked_count + 2
