"""VL batches: token fields padded, image fields concatenated, micro-batches take exactly their rows' images."""

import pytest
import torch

from honing.data.vision.batches import CAUSAL_MASK, SHARES, ProcessedVLCollator
from honing.losses import IGNORE_INDEX


def row(length: int, patches: int, value: float) -> dict:
    """A Qwen-VL-like row: ids, labels, token types, and ``patches`` pixel rows for one image."""
    ids = torch.arange(1, length + 1)
    return {
        "input_ids": ids,
        "labels": ids.clone(),
        "attention_mask": torch.ones(length, dtype=torch.long),
        "mm_token_type_ids": torch.ones(length, dtype=torch.int32),
        "pixel_values": torch.full((patches, 6), value),
        "image_grid_thw": torch.tensor([[1, patches, 1]]),
    }


def test_pads_token_fields_and_concatenates_image_fields():
    collate = ProcessedVLCollator(0, ("pixel_values", "image_grid_thw", "mm_token_type_ids"))
    batch = collate([row(3, 2, 1.0), row(5, 4, 2.0)])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]
    assert batch["labels"][0, 3:].tolist() == [IGNORE_INDEX] * 2
    assert batch["mm_token_type_ids"].tolist() == [[1, 1, 1, 0, 0], [1] * 5]
    assert batch["pixel_values"].shape == (6, 6)
    assert batch[SHARES]["pixel_values"].tolist() == [2, 4]
    assert batch["image_grid_thw"].tolist() == [[1, 2, 1], [1, 4, 1]]


def test_split_gives_each_micro_batch_its_own_rows_images():
    collate = ProcessedVLCollator(0, ("pixel_values", "image_grid_thw"))
    items = [row(3, 2, 1.0), row(4, 3, 2.0), row(2, 1, 3.0)]
    batch = collate(items)
    micro = collate.split(batch, 1)
    assert len(micro) == 3
    for item, part in zip(items, micro):
        assert torch.equal(part["pixel_values"], item["pixel_values"])
        assert torch.equal(part["image_grid_thw"], item["image_grid_thw"])
        assert SHARES not in part
    pairs = collate.split(batch, 2)
    assert pairs[0]["pixel_values"].shape[0] == 5 and pairs[1]["pixel_values"].shape[0] == 1
    assert set(collate.model_inputs(pairs[0])) == {"input_ids", "attention_mask", "pixel_values", "image_grid_thw"}


def test_rows_without_images_and_per_row_stacks():
    collate = ProcessedVLCollator(0, ("pixel_values",))
    text_only = {"input_ids": torch.tensor([1, 2]), "labels": torch.tensor([1, 2])}
    with_image = {"input_ids": torch.tensor([1, 2, 3]), "labels": torch.tensor([1, 2, 3])}
    with_image["pixel_values"] = torch.ones(1, 2, 3, 4, 4)  # Idefics3-like: [row, images, C, H, W]
    two = dict(with_image, pixel_values=torch.ones(1, 1, 3, 4, 4))
    batch = collate([text_only, with_image, two])
    assert batch["pixel_values"].shape == (2, 2, 3, 4, 4)  # the one-image row padded with a zero image
    assert batch["pixel_values"][1, 1].abs().sum() == 0
    first, second = collate.split(batch, 1)[:2]
    assert "pixel_values" not in first and second["pixel_values"].shape[0] == 1


def test_filler_counts_for_nothing():
    collate = ProcessedVLCollator(0, ("pixel_values",))
    batch = collate([row(3, 2, 1.0)])
    filler = collate.filler(batch)
    assert (filler["labels"] == IGNORE_INDEX).all() and collate.num_tokens(filler) == 0


def test_micro_batches_are_processed_together_as_each_row_alone(tmp_path):
    pytest.importorskip("torchvision")
    from PIL import Image
    from transformers import AutoProcessor

    from honing.data.vision.batches import VLCollator
    from honing.data.vision.processing import VLDataset, tokenize_vl_conversations
    from honing.models.tiny_vl import build_tiny_processor

    processor = AutoProcessor.from_pretrained(build_tiny_processor("qwen2_vl", str(tmp_path / "processor")))
    images = {i: Image.new("RGB", size, (40 * i, 90, 200)) for i, size in enumerate([(56, 28), (112, 56), (28, 28)])}
    rows = [
        (
            [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read" + "!" * i}]},
                {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
            ],
            [images[i]],
        )
        for i in images
    ]
    examples = tokenize_vl_conversations(processor, rows, chat_template=processor.chat_template, chunk_size=2)
    for i, example in enumerate(examples):
        example.images = (i,)
    examples[1].input_ids, examples[1].labels = examples[1].input_ids[:-2], examples[1].labels[:-2]  # truncated
    dataset = VLDataset(examples, processor, load_image=lambda key: images[key])
    collate = VLCollator(processor, processor.tokenizer.pad_token_id, ("pixel_values", "image_grid_thw"))
    micro = collate.split(collate([dataset[i] for i in range(3)]), 2)
    assert [part["input_ids"].shape[0] for part in micro] == [2, 1]
    alone = [dataset.processed(i) for i in range(3)]
    together = [(micro[0], 0), (micro[0], 1), (micro[1], 0)]
    for row, (part, index) in zip(alone, together):
        length = len(row["input_ids"])
        assert part["input_ids"][index, :length].tolist() == row["input_ids"].tolist()
        assert part["labels"][index, :length].tolist() == row["labels"].tolist()
        assert int(part["attention_mask"][index].sum()) == length
        assert part["mm_token_type_ids"][index, :length].tolist() == row["mm_token_type_ids"].tolist()
    assert torch.equal(micro[0]["pixel_values"], torch.cat([alone[0]["pixel_values"], alone[1]["pixel_values"]]))
    assert torch.equal(micro[1]["image_grid_thw"], alone[2]["image_grid_thw"])


def tiny_vl_model(model_type: str, vocab_size: int) -> torch.nn.Module:
    """The family's tiny random model (seed 0), sdpa attention."""
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import tiny_vl_config

    torch.manual_seed(0)
    config = tiny_vl_config(model_type, vocab_size=vocab_size)
    return AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_image_only_batches_equal_the_full_processor_call(tmp_path, model_type):
    """Qwen-VL batches from the image processor alone (token types from the ids) are the processor call's, key for
    key, plus the rope positions the model would compute (``get_rope_index``), with which its logits are the same
    bit for bit; a row whose image tokens do not match its image's grid is refused."""
    pytest.importorskip("torchvision")
    from PIL import Image
    from transformers import AutoProcessor
    from transformers.vision_utils import get_vision_position_ids

    from honing.data.vision.batches import VLCollator
    from honing.data.vision.processing import VLDataset, tokenize_vl_conversations
    from honing.errors import DataError
    from honing.models.tiny_vl import build_tiny_processor
    from honing.models.vl_families import FAMILIES

    family = FAMILIES[model_type]
    assert family.image_only_batches
    processor = AutoProcessor.from_pretrained(build_tiny_processor(model_type, str(tmp_path / "processor")))
    sizes = [(56, 28), (112, 56), (64, 64), (64, 64)]  # two of one size to resize: stacked in one micro-batch
    images = {i: Image.new("RGB", size, (40 * i, 90, 200)) for i, size in enumerate(sizes)}
    contents = [[0], [1, 2], [], [3]]  # one image, two images, none, one
    rows = [
        (
            [
                {"role": "user", "content": [*({"type": "image"} for _ in keys), {"type": "text", "text": "Read" * i}]},
                {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
            ],
            [images[key] for key in keys],
        )
        for i, keys in enumerate(contents)
    ]
    examples = tokenize_vl_conversations(processor, rows, chat_template=processor.chat_template, chunk_size=4)
    for example, keys in zip(examples, contents):
        example.images = tuple(keys)
    dataset = VLDataset(examples, processor, load_image=lambda key: images[key])
    full = VLCollator(processor, processor.tokenizer.pad_token_id, family.model_input_keys)
    image_token_id = processor.tokenizer.convert_tokens_to_ids(family.image_token)
    fast = VLCollator(
        processor, processor.tokenizer.pad_token_id, family.model_input_keys, image_token_id=image_token_id
    )
    model = tiny_vl_model(model_type, len(processor.tokenizer))
    batch = full([dataset[i] for i in range(4)])
    for size in (1, 2, 4):
        for expected, got in zip(full.split(batch, size), fast.split(batch, size)):
            for key, value in expected.items():
                assert value.dtype == got[key].dtype and torch.equal(value, got[key]), (size, key)
            if "image_grid_thw" not in expected:  # no image: the model's own 1-D positions
                assert expected.keys() == got.keys()
                continue
            assert expected.keys() | {"position_ids", "image_position_ids"} == got.keys()
            patches = get_vision_position_ids(expected["image_grid_thw"], model.model.visual.spatial_merge_size)
            assert torch.equal(got["image_position_ids"], patches), size
            rope, _ = model.model.get_rope_index(
                expected["input_ids"],
                mm_token_type_ids=expected["mm_token_type_ids"],
                image_grid_thw=expected["image_grid_thw"],
                attention_mask=expected["attention_mask"],
            )
            assert torch.equal(got["position_ids"], rope), size
    assert fast.direct_patches  # after the first check, pixels from the image processor's own steps: equal above
    masked = VLCollator(
        processor, processor.tokenizer.pad_token_id, family.model_input_keys, image_token_id=image_token_id
    )
    masked.sdpa_masks = True  # the model's 4-D causal mask built in the collator
    with torch.no_grad():  # the whole batch: padded rows with one, two and no images
        logits = [model(**c.model_inputs(c.split(batch, 4)[0])).logits for c in (full, fast, masked)]
        inputs = fast.model_inputs(fast.split(batch, 4)[0])
        wrong = model(**dict(inputs, image_position_ids=torch.zeros_like(inputs["image_position_ids"]))).logits
    assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])
    four_d = masked.model_inputs(masked.split(batch, 4)[0])["attention_mask"]
    assert four_d.shape == (4, 1, *batch["input_ids"].shape[1:] * 2) and four_d.dtype == torch.bool
    assert CAUSAL_MASK not in masked.split(batch, 1)[0]  # an unpadded row keeps transformers' own path
    assert not torch.equal(wrong, logits[1])  # the tower reads the patch positions given, not its own
    # a stored row with one image token too few for its image's grid
    broken = dict(batch, input_ids=batch["input_ids"].clone())
    first = int((broken["input_ids"][0] == image_token_id).nonzero()[0])
    broken["input_ids"][0, first] = processor.tokenizer.pad_token_id
    with pytest.raises(DataError, match=r"image tokens but their images give"):
        fast.split(broken, 4)
