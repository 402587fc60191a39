"""One rank of tests/models/test_ulysses.py under torchrun: a tiny Llama's forward and gradients with its rows split
over 2 sequence-parallel ranks, against the same model on whole rows; writes the largest differences as JSON."""

import json
import os
import sys

import torch

from honing.distributed import barrier, get_rank, prepare_training_environment
from honing.losses import IGNORE_INDEX, next_token_targets, targets_cross_entropy_sum
from honing.methods.sequence_split import split_model_inputs, split_rows
from honing.models.ulysses import apply_context_parallel, heads_to_sequence, sequence_to_heads
from honing.parallel_dims import ParallelDims
from tests.helpers import tiny_llama

WIDTH = 12


def layouts() -> dict[str, dict[str, torch.Tensor]]:
    """Two rows each: plain, packed documents (one crossing the ranks' boundary), right-padded to an odd width."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, 64, (2, WIDTH), generator=generator)
    labels = input_ids.clone()
    labels[:, :3] = IGNORE_INDEX  # a prompt without targets, as assistant-only SFT has
    documents = [[5, 4, 3], [2, 7, 3]]
    positions = torch.stack([torch.cat([torch.arange(length) for length in row]) for row in documents])
    odd = WIDTH - 1
    padding = (torch.arange(odd) < torch.tensor([[odd], [7]])).long()
    padded_labels = labels[:, :odd].masked_fill(padding == 0, IGNORE_INDEX)
    return {
        "plain": {"input_ids": input_ids, "labels": labels},
        "packed": {"input_ids": input_ids, "labels": labels, "position_ids": positions},
        "padded": {"input_ids": input_ids[:, :odd], "labels": padded_labels, "attention_mask": padding},
    }


def compare(implementation: str, kv_heads: int, name: str, batch: dict[str, torch.Tensor], dims) -> dict:
    """Largest differences of logits, loss and gradients between whole rows and this rank's slices."""
    overrides = dict(num_attention_heads=4, num_key_value_heads=kv_heads, attn_implementation=implementation)
    reference, split = tiny_llama(**overrides), tiny_llama(**overrides)
    apply_context_parallel(split, dims)
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    logits = reference(**inputs, use_cache=False).logits
    loss = targets_cross_entropy_sum(logits, next_token_targets(batch["labels"]))
    loss.backward()

    micro = split_rows(batch, dims.local_rank("cp"), dims.cp)
    local_logits = split(**split_model_inputs(split, micro), use_cache=False).logits
    local_loss = targets_cross_entropy_sum(local_logits, micro["targets"])
    local_loss.backward()
    total = local_loss.detach().clone()
    torch.distributed.all_reduce(total)
    width, local = batch["input_ids"].shape[1], local_logits.shape[1]
    start = dims.local_rank("cp") * local
    real = max(0, min(local, width - start))  # the padded tail has no reference
    differences = {"logits": (local_logits[:, :real] - logits[:, start : start + real]).abs().max().item()}
    differences["loss"] = abs(total.item() - loss.item())
    grads = 0.0
    for (_, mine), (_, theirs) in zip(split.named_parameters(), reference.named_parameters()):
        grad = mine.grad.clone()
        torch.distributed.all_reduce(grad)  # each rank's slice contributes its tokens' share
        grads = max(grads, (grad - theirs.grad).abs().max().item())
    differences["grads"] = grads
    differences["loss_value"] = loss.item()
    return differences


def exchanges(dims) -> float:
    """Largest difference of the all-to-alls from the whole rows gathered: query and key in one exchange, a value
    of another head size (MLA) in its own, and the inverse back to this rank's slice."""
    rank, group = dims.local_rank("cp"), dims.group("cp")
    generator = torch.Generator().manual_seed(1)
    whole = [torch.randn(2, heads, 8, dim, generator=generator) for heads, dim in ((4, 6), (2, 6), (2, 5))]
    mine = [state[:, :, rank * 4 : (rank + 1) * 4] for state in whole]
    received = sequence_to_heads(mine, group, 2)
    largest = 0.0
    for got, state, back in zip(received, whole, mine):
        share = state.shape[1] // 2
        largest = max(largest, (got - state[:, rank * share : (rank + 1) * share]).abs().max().item())
        returned = heads_to_sequence(got.transpose(1, 2), group, 2).transpose(1, 2)
        largest = max(largest, (returned - back).abs().max().item())
    return largest


def main() -> None:
    prepare_training_environment(seed=0)
    dims = ParallelDims(dp_shard=1, cp=2, world_size=2)
    dims.build_mesh("cpu")
    torch.use_deterministic_algorithms(True)
    results = {"exchanges": {"logits": exchanges(dims), "loss": 0.0, "grads": 0.0, "loss_value": 1.0}}
    for implementation in ("sdpa", "eager"):
        for kv_heads in (4, 1):  # 1 key/value head for 2 ranks: repeated before the all-to-all
            for name, batch in layouts().items():
                results[f"{implementation}-kv{kv_heads}-{name}"] = compare(implementation, kv_heads, name, batch, dims)
    if get_rank() == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump(results, handle)
    barrier()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads outlive the group: leave without interpreter finalization


if __name__ == "__main__":
    main()
