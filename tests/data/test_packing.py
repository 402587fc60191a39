"""Tests for honing/data/chat/packing.py: best-fit bins, packed rows, and packed loss == unpacked loss."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from honing.data.chat.packing import PackedDataset, best_fit_decreasing
from honing.data.loader import DataLoader
from honing.errors import DataError
from honing.losses import count_target_tokens, cross_entropy_sum
from honing.methods.lm import LMTrainModule
from tests.helpers import tiny_llama


@dataclass
class Example:
    """A tokenized SFT example, as the chat tokenizer step produces it."""

    input_ids: list[int]
    labels: list[int]


# Six examples of different lengths; the first PROMPTS[i] tokens carry no loss (a prompt).
LENGTHS = [5, 3, 7, 2, 4, 6]
PROMPTS = [2, 0, 3, 1, 0, 2]
# Alone, example i has length - max(prompt, 1) next-token targets (label 0 is never a target).
TARGET_TOKENS = 3 + 2 + 4 + 1 + 3 + 4


def sft_examples(seed: int = 0) -> list[Example]:
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for length, prompt in zip(LENGTHS, PROMPTS):
        ids = torch.randint(1, 64, (length,), generator=generator).tolist()
        examples.append(Example(ids, [-100] * prompt + ids[prompt:]))
    return examples


def naive_best_fit_decreasing(lengths, max_length):
    """O(n·bins) reference: the open bin with the least room that fits, lowest bin id on ties."""
    bins, room = [], []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        fits = [(r, b) for b, r in enumerate(room) if r >= lengths[index]]
        if fits:
            _, b = min(fits)
        else:
            b = len(bins)
            bins.append([])
            room.append(max_length)
        bins[b].append(index)
        room[b] -= lengths[index]
    return bins


# --- best fit decreasing --------------------------------------------------------------------------


def test_best_fit_decreasing_hand_example():
    # sorted: 7(#2) 6(#5) 5(#0) 4(#4) 3(#1) 2(#3); 7→new(5 left) 6→new(6) 5→bin0(0) 4→bin1(2) 3→new(9) 2→bin1(0)
    assert best_fit_decreasing(LENGTHS, 12) == [[2, 0], [5, 4, 3], [1]]


def test_best_fit_takes_the_fullest_bin_not_the_first():
    # 7→bin0 (3 left), 4→bin1 (6), 4→bin1 (2); the 1 goes to bin1 (2 left), first-fit would pick bin0 (3 left)
    assert best_fit_decreasing([4, 1, 7, 4], 10) == [[2], [0, 3, 1]]


def test_best_fit_matches_the_naive_reference_on_random_lengths():
    rng = random.Random(0)
    lengths = [rng.randint(1, 64) for _ in range(300)]
    bins = best_fit_decreasing(lengths, 64)
    assert bins == naive_best_fit_decreasing(lengths, 64)
    assert sorted(i for b in bins for i in b) == list(range(300))  # every index exactly once
    assert max(sum(lengths[i] for i in b) for b in bins) <= 64
    assert best_fit_decreasing(lengths, 64) == bins  # deterministic


@pytest.mark.parametrize(
    "lengths, max_length, message",
    [
        ([3, 9, 2], 8, r"example 1 has 9 tokens; packing expects 1..max_length=8"),
        ([3, 0], 8, r"example 1 has 0 tokens"),
        ([3], 0, r"max_length must be >= 1, got 0"),
    ],
)
def test_best_fit_rejects_bad_lengths(lengths, max_length, message):
    with pytest.raises(DataError, match=message):
        best_fit_decreasing(lengths, max_length)


# --- packed rows ----------------------------------------------------------------------------------


def test_packed_rows_hand_example():
    examples = [
        Example([1, 2, 3], [-100, 2, 3]),
        Example([4, 5], [4, 5]),
        {"input_ids": [6, 7, 8, 9], "labels": [-100, -100, 8, 9]},
    ]  # a mapping works too
    packed = PackedDataset(examples, 6, pad_token_id=0)
    # sorted 4(#2) 3(#0) 2(#1): #2→row0 (2 left), #0→row1 (3 left), #1→row0 (0 left)
    assert packed.bins == [[2, 1], [0]]
    assert len(packed) == 2
    row0, row1 = packed[0], packed[1]
    assert set(row0) == {"input_ids", "labels", "position_ids", "num_real_tokens"}  # no attention_mask
    assert row0["input_ids"].tolist() == [6, 7, 8, 9, 4, 5]
    assert row0["labels"].tolist() == [-100, -100, 8, 9, -100, 5]  # the 4 would be predicted from the 9
    assert row0["position_ids"].tolist() == [0, 1, 2, 3, 0, 1]
    assert row0["num_real_tokens"] == 6
    assert row1["input_ids"].tolist() == [1, 2, 3, 0, 0, 0]
    assert row1["labels"].tolist() == [-100, 2, 3, -100, -100, -100]
    assert row1["position_ids"].tolist() == [0, 1, 2, 0, 1, 2]  # the pad tail is a block of its own
    assert row1["num_real_tokens"] == 3
    assert row0["input_ids"].dtype == torch.long
    assert packed.num_real_tokens == 9
    assert packed.packing_efficiency == 9 / 12


def test_packing_efficiency_of_the_sft_examples():
    packed = PackedDataset(sft_examples(), 12, pad_token_id=0)
    assert packed.bins == [[2, 0], [5, 4, 3], [1]]
    assert [packed[i]["num_real_tokens"] for i in range(3)] == [12, 12, 3]
    assert packed.packing_efficiency == 27 / 36


@pytest.mark.parametrize(
    "examples, kwargs, message",
    [
        ([Example([1] * 9, [1] * 9)], {"max_length": 8, "pad_token_id": 0}, "example 0 has 9 tokens"),
        (
            [Example([1, 2], [1])],
            {"max_length": 8, "pad_token_id": 0},
            "example 0: input_ids has 2 tokens but labels has 1",
        ),
        ([Example([1], [1]), Example([], [])], {"max_length": 8, "pad_token_id": 0}, "example 1 has no tokens"),
        ([Example([1, 2], [1, -5])], {"max_length": 8, "pad_token_id": 0}, "example 0: labels hold -5"),
        ([{"input_ids": [1]}], {"max_length": 8, "pad_token_id": 0}, "example 0 has no 'labels'"),
        ([Example([1], [1])], {"max_length": 8, "pad_token_id": None}, "pad_token_id is None"),
    ],
)
def test_packed_dataset_rejects_bad_examples(examples, kwargs, message):
    with pytest.raises(DataError, match=message):
        PackedDataset(examples, **kwargs)


# --- packed loss == unpacked loss -----------------------------------------------------------------


def unpacked_loss(model, examples):
    """Token-summed loss of every example run alone (batch 1, no padding), and its target count."""
    loss, tokens = 0.0, 0
    with torch.no_grad():
        for example in examples:
            ids, labels = torch.tensor([example.input_ids]), torch.tensor([example.labels])
            loss += cross_entropy_sum(model(input_ids=ids, use_cache=False).logits, labels).item()
            tokens += int(count_target_tokens(labels))
    return loss, tokens


def packed_batch(examples):
    loader = DataLoader(PackedDataset(examples, 12, pad_token_id=0), global_batch_size=3, shuffle=False)
    return next(iter(loader))


def direct_loss(model, batch, **inputs):
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], **inputs).logits
    return cross_entropy_sum(logits, batch["labels"]).item() / int(count_target_tokens(batch["labels"]))


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_packed_loss_equals_unpacked_loss(attn_implementation):
    model = tiny_llama(seed=3, attn_implementation=attn_implementation).eval()
    examples = sft_examples()
    loss_sum, tokens = unpacked_loss(model, examples)
    assert tokens == TARGET_TOKENS == 17
    batch = packed_batch(examples)
    # The real training path: the TrainModule picks the model inputs from the batch and sets use_cache=False.
    module = LMTrainModule(model, torch.optim.SGD(model.parameters(), lr=0.0), micro_batch_size=2)
    result = module.eval_batch(batch)
    assert int(result["tokens"]) == 17
    assert abs(result["loss_sum"].item() / 17 - loss_sum / 17) < 1e-5
    assert abs(direct_loss(model, batch, position_ids=batch["position_ids"], use_cache=False) - loss_sum / 17) < 1e-5


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_packed_loss_differs_when_documents_can_attend_to_each_other(attn_implementation):
    """The equality above proves separation: every way of letting documents see each other changes the loss."""
    model = tiny_llama(seed=3, attn_implementation=attn_implementation).eval()
    reference = unpacked_loss(model, sft_examples())[0] / 17
    batch = packed_batch(sft_examples())
    positions = batch["position_ids"]
    whole_row = torch.arange(12).expand(3, 12)
    leaks = {
        "one position range over the whole row": direct_loss(model, batch, position_ids=whole_row, use_cache=False),
        "an all-ones attention_mask": direct_loss(
            model, batch, position_ids=positions, attention_mask=torch.ones_like(positions), use_cache=False
        ),
        # The pitfall: the config's default use_cache=True makes a KV cache, and transformers then
        # skips the per-document mask.
        "the default use_cache": direct_loss(model, batch, position_ids=positions),
    }
    for name, loss in leaks.items():
        assert abs(loss - reference) > 1e-3, name


# --- the loader over packed rows ------------------------------------------------------------------


def test_loader_over_packed_rows_resumes_mid_epoch_bit_identically():
    rng = random.Random(1)
    examples = []
    for _ in range(40):
        ids = [rng.randint(1, 63) for _ in range(rng.randint(1, 8))]
        examples.append(Example(ids, ids))
    packed = PackedDataset(examples, 8, pad_token_id=0)
    reference = DataLoader(packed, global_batch_size=2, seed=4)
    expected = [batch for _ in range(2) for batch in reference]  # two full epochs

    interrupted = DataLoader(packed, global_batch_size=2, seed=4)
    taken = []
    for batch in interrupted:
        taken.append(batch)
        if len(taken) == 3:
            break
    resumed = DataLoader(packed, global_batch_size=2, seed=4)
    resumed.load_state_dict(interrupted.state_dict())
    taken += [batch for _ in range(2) for batch in resumed]
    assert len(taken) == len(expected) == 2 * (len(packed) // 2)
    for got, want in zip(taken, expected):
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_throughput_counts_real_tokens_of_packed_rows():
    loader = DataLoader(
        PackedDataset(sft_examples(), 12, pad_token_id=0), global_batch_size=2, shuffle=False, rank=1, world_size=2
    )
    batch = next(iter(loader))  # rank 1 holds row 1 alone: 12 real tokens
    assert batch["num_real_tokens"].tolist() == [12]
    assert loader.collate_fn.num_tokens(batch) == 12
