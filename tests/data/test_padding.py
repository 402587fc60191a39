"""Tests for honing/data/chat/padding.py: padded batches, their loss, and the length-grouped order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from honing.data.chat.padding import PaddedDataset, length_grouped_order, pad_collate
from honing.data.loader import DataLoader
from honing.errors import DataError
from honing.methods.lm import LMTrainModule
from tests.data.test_packing import TARGET_TOKENS, Example, sft_examples, unpacked_loss
from tests.helpers import tiny_llama

# A skewed SFT length mix: 24 short answers and 8 long ones.
SKEWED_LENGTHS = [2] * 24 + [10, 20, 30, 40, 50, 60, 70, 80]


def skewed_dataset() -> PaddedDataset:
    """Row i is n tokens of value i + 1, so a batch says which rows it holds."""
    return PaddedDataset([Example([i + 1] * n, [i + 1] * n) for i, n in enumerate(SKEWED_LENGTHS)])


def grouped_loader(dataset, **kwargs) -> DataLoader:
    return DataLoader(dataset, global_batch_size=4, collate_fn=pad_collate(0), group_by_length=True, **kwargs)


def row_ids(loader) -> list[list[int]]:
    return [batch["input_ids"][:, 0].tolist() for batch in loader]


def pad_tokens(loader) -> int:
    return sum(int((batch["attention_mask"] == 0).sum()) for batch in loader)


def test_padded_dataset_items_keep_their_length():
    dataset = PaddedDataset([Example([5, 6, 7], [-100, 6, 7]), {"input_ids": [8], "labels": [8]}])
    assert len(dataset) == 2 and dataset.lengths == [3, 1]
    assert dataset[0]["input_ids"].tolist() == [5, 6, 7] and dataset[0]["labels"].tolist() == [-100, 6, 7]
    assert dataset[1]["input_ids"].tolist() == [8] and dataset[1]["input_ids"].dtype == torch.long


def test_pad_collate_right_pads_to_the_longest_row():
    collate = pad_collate(pad_token_id=9)
    batch = collate(
        [
            {"input_ids": torch.tensor([5, 6, 7]), "labels": torch.tensor([-100, 6, 7])},
            {"input_ids": [8], "labels": [8]},
        ]
    )  # lists work too
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 9]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["num_real_tokens"].tolist() == [3, 1]


def test_pad_collate_needs_a_pad_token():
    with pytest.raises(DataError, match="pad_token_id is None; padded batches need a pad token id"):
        pad_collate(None)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_padded_loss_equals_unpadded_loss(attn_implementation):
    model = tiny_llama(seed=3, attn_implementation=attn_implementation).eval()
    examples = sft_examples()
    loss_sum, tokens = unpacked_loss(model, examples)
    loader = DataLoader(PaddedDataset(examples), global_batch_size=6, shuffle=False, collate_fn=pad_collate(0))
    batch = next(iter(loader))
    assert batch["input_ids"].shape == (6, 7)
    module = LMTrainModule(model, torch.optim.SGD(model.parameters(), lr=0.0), micro_batch_size=4)
    result = module.eval_batch(batch)
    assert int(result["tokens"]) == tokens == TARGET_TOKENS
    assert abs(result["loss_sum"].item() / tokens - loss_sum / tokens) < 1e-5


def test_throughput_counts_real_tokens_of_padded_rows():
    loader = DataLoader(
        PaddedDataset(sft_examples()),
        global_batch_size=4,
        shuffle=False,
        collate_fn=pad_collate(0),
        rank=0,
        world_size=2,
    )
    batch = next(iter(loader))  # rank 0 holds examples 0 and 1: 5 + 3 real tokens, padded to 2 x 5
    assert batch["input_ids"].shape == (2, 5)
    assert loader.collate_fn.num_tokens(batch) == 5 + 3  # times the world size in the train module


# --- length-grouped order -------------------------------------------------------------------------


def test_length_grouped_order_sorts_within_windows():
    lengths = np.array([1, 8, 2, 7, 3, 6, 4, 5, 9])
    # windows of 2 batches of 2 rows: [0,1,2,3] sorted longest first, then [4,5,6,7]; row 8 is the remainder
    grouped = length_grouped_order(np.arange(9), lengths, 2, rng=None, window_batches=2)
    assert grouped.tolist() == [1, 3, 2, 0, 5, 7, 6, 4]
    shuffled = length_grouped_order(np.arange(9), lengths, 2, rng=np.random.default_rng(0), window_batches=2)
    batches = shuffled.reshape(-1, 2).tolist()
    assert sorted(batches) == sorted(grouped.reshape(-1, 2).tolist())  # the same batches ...
    assert batches != grouped.reshape(-1, 2).tolist()  # ... in a shuffled order


def test_group_by_length_is_deterministic_and_visits_every_row_once():
    dataset = PaddedDataset([Example([1] * n, [1] * n) for n in SKEWED_LENGTHS + [3, 4]])  # 34 rows
    loader, twin = grouped_loader(dataset, seed=2), grouped_loader(dataset, seed=2)
    assert loader.order(1).tolist() == twin.order(1).tolist()
    for epoch in (1, 2):
        order = loader.order(epoch)
        assert len(order) == len(set(order.tolist())) == 32  # 2 rows dropped, none twice
    assert loader.order(1).tolist() != loader.order(2).tolist()


def test_group_by_length_pads_far_less_than_random_order():
    dataset = skewed_dataset()
    random_order = DataLoader(dataset, global_batch_size=4, seed=0, collate_fn=pad_collate(0))
    grouped = grouped_loader(dataset, seed=0)
    # One window holds the whole epoch: batches [80,70,60,50] and [40,30,20,10] pad 60 each, the 2s none.
    assert pad_tokens(grouped) == (4 * 80 - 260) + (4 * 40 - 100) == 120
    # Seed 0's permutation spreads the long rows over 6 batches (the rest are 2s), each padding to its longest:
    # [80] 320-86, [30] 120-36, [50] 200-56, [70,20] 280-94, [40] 160-46, [60,10] 240-74.
    assert pad_tokens(random_order) == 234 + 84 + 144 + 186 + 114 + 166 == 928


def test_group_by_length_gives_every_rank_its_slice_of_the_same_global_batch():
    dataset = skewed_dataset()
    whole = row_ids(grouped_loader(dataset, seed=5))
    ranks = [row_ids(grouped_loader(dataset, seed=5, rank=r, world_size=2)) for r in (0, 1)]
    assert [r0 + r1 for r0, r1 in zip(*ranks)] == whole
    assert sorted(row for batch in whole for row in batch) == list(range(1, 33))


def test_group_by_length_resumes_mid_epoch_bit_identically():
    dataset = skewed_dataset()
    reference = grouped_loader(dataset, seed=3)
    expected = [batch for _ in range(2) for batch in reference]  # two full epochs
    interrupted, taken = grouped_loader(dataset, seed=3), []
    for batch in interrupted:
        taken.append(batch)
        if len(taken) == 5:
            break
    resumed = grouped_loader(dataset, seed=3)
    resumed.load_state_dict(interrupted.state_dict())
    taken += [batch for _ in range(2) for batch in resumed]
    assert len(taken) == len(expected) == 16
    for got, want in zip(taken, expected):
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_group_by_length_needs_row_lengths():
    class NoLengths(torch.utils.data.Dataset):
        def __len__(self):
            return 8

    with pytest.raises(DataError, match="group_by_length needs a dataset with one length per row .*NoLengths"):
        DataLoader(NoLengths(), global_batch_size=4, group_by_length=True)
