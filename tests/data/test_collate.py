import torch

from honing.data.collate import Collator, PadCollator, stack_collate


def rows(n, width=4):
    return [
        {
            "input_ids": torch.arange(width) + i,
            "labels": torch.arange(width) + i,
            "position_ids": torch.arange(width),
            "num_real_tokens": width - (i % 2),
        }
        for i in range(n)
    ]


def test_split_cuts_rows_and_keeps_every_tensor():
    batch = stack_collate(rows(5))
    micro = stack_collate.split(batch, 2)
    assert [m["input_ids"].shape[0] for m in micro] == [2, 2, 1]
    assert torch.equal(torch.cat([m["input_ids"] for m in micro]), batch["input_ids"])
    assert all(m.keys() == {"input_ids", "labels", "position_ids", "num_real_tokens"} for m in micro)
    assert len(stack_collate.split(batch, 99)) == 1


def test_model_inputs_leave_the_loss_keys_out():
    micro = stack_collate.split(stack_collate(rows(2)), 2)[0]
    assert stack_collate.model_inputs(micro).keys() == {"input_ids", "position_ids"}

    class WithPixels(Collator):
        model_input_keys = (*Collator.model_input_keys, "pixel_values")

    assert "pixel_values" in WithPixels().model_inputs({**micro, "pixel_values": torch.zeros(1)})


def test_filler_counts_for_nothing():
    batch = stack_collate(rows(3))
    filler = stack_collate.filler(batch)
    assert bool((filler["labels"] == -100).all()) and int(filler["num_real_tokens"].sum()) == 0
    assert torch.equal(filler["input_ids"], batch["input_ids"])  # the same forward, nothing learned from it
    assert stack_collate.num_tokens(filler) == 0 and stack_collate.num_tokens(batch) == 4 + 3 + 4


def test_pad_collator_counts_real_tokens_and_splits_like_any_batch():
    collate = PadCollator(0)
    batch = collate([{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4], "labels": [4]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]] and collate.num_tokens(batch) == 4
    assert [m["attention_mask"].tolist() for m in collate.split(batch, 1)] == [[[1, 1, 1]], [[1, 0, 0]]]


def test_pad_collator_gives_rows_stored_as_lists_the_batch_of_tensor_rows():
    """Rows kept as lists (VL rows) are padded in one go: the very batch, dtypes included, that tensor rows give."""
    rows = [([5, 6, 7], [-100, 6, 7]), ([8], [8]), ([1, 2, 3, 4], [-100, -100, 3, 4])]
    as_lists = [{"input_ids": ids, "labels": labels} for ids, labels in rows]
    as_tensors = [{"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)} for ids, labels in rows]
    collate = PadCollator(pad_token_id=0)
    from_lists, from_tensors = collate(as_lists), collate(as_tensors)
    assert from_lists.keys() == from_tensors.keys()
    for key, value in from_tensors.items():
        assert from_lists[key].dtype == value.dtype and torch.equal(from_lists[key], value), key
    assert from_lists["input_ids"].tolist() == [[5, 6, 7, 0], [8, 0, 0, 0], [1, 2, 3, 4]]
    assert from_lists["labels"][1].tolist() == [8, -100, -100, -100]
