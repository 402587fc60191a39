"""Packed Qwen-VL rows (per-document 3-D rope positions, no attention mask) give the loss of their documents alone."""

import pytest
import torch
from PIL import Image

from honing.data.vision.packing import PackedVLCollator, VLPackedDataset
from honing.data.vision.processing import VLDataset, tokenize_vl_conversation
from honing.losses import cross_entropy_sum

pytest.importorskip("torchvision")
from transformers import AutoModelForImageTextToText, AutoProcessor  # noqa: E402

from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config  # noqa: E402
from honing.models.vl_families import family_for, position_ids_for_packing  # noqa: E402

SIZES = [(56, 28), (84, 56), (28, 28)]


def image(width: int, height: int, seed: int) -> Image.Image:
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (height, width, 3), generator=generator, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())


def conversation(index: int) -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Read picture {index}."}]},
        {"role": "assistant", "content": [{"type": "text", "text": f"It says {index * 37}."}]},
    ]


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_packed_loss_equals_unpacked_loss(tmp_path, model_type):
    processor = AutoProcessor.from_pretrained(build_tiny_processor(model_type, str(tmp_path / "processor")))
    torch.manual_seed(0)
    config = tiny_vl_config(model_type, vocab_size=len(processor.tokenizer))
    model = AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa").eval()
    images = {i: [image(*size, seed=i)] for i, size in enumerate(SIZES)}
    examples = []
    for i in range(len(SIZES)):
        example, _ = tokenize_vl_conversation(
            processor, conversation(i), images[i], chat_template=processor.chat_template
        )
        example.images = (i,)
        examples.append(example)
    rows = VLDataset(examples, processor, load_image=lambda key: images[key][0])
    family = family_for(model_type)

    with torch.no_grad():
        alone_sum, alone_tokens = 0.0, 0
        for i in range(len(examples)):
            row = rows.processed(i)
            inputs = {key: row[key][None] if row[key].dim() == 1 else row[key] for key in row if key != "labels"}
            logits = model(**inputs, use_cache=False).logits
            alone_sum += float(cross_entropy_sum(logits, row["labels"][None]))
            alone_tokens += int((row["labels"][1:] != -100).sum())

        total = sum(len(example.input_ids) for example in examples)
        packed = VLPackedDataset(
            examples,
            total + 5,  # one row with a pad tail
            rows=rows,
            rope_positions=lambda ids, types, grid: position_ids_for_packing(model, ids, types, grid),
            pad_token_id=processor.tokenizer.pad_token_id,
        )
        assert len(packed) == 1
        collator = PackedVLCollator(processor.tokenizer.pad_token_id, family.model_input_keys)
        batch = collator.split(collator([packed[0]]), 1)[0]
        assert "attention_mask" not in collator.model_inputs(batch)
        assert batch["position_ids"].shape == (4, 1, total + 5)
        logits = model(**collator.model_inputs(batch), use_cache=False).logits
        packed_sum = float(cross_entropy_sum(logits, batch["labels"]))
        packed_tokens = int((batch["labels"] != -100).sum())

        # the control: the same row with text positions that do not restart lets documents see each other
        crossed = dict(batch)
        crossed["position_ids"] = batch["position_ids"].clone()
        crossed["position_ids"][0] = torch.arange(total + 5)
        crossed_logits = model(**collator.model_inputs(crossed), use_cache=False).logits
        crossed_sum = float(cross_entropy_sum(crossed_logits, batch["labels"]))

    assert packed_tokens == alone_tokens
    assert packed_sum / packed_tokens == pytest.approx(alone_sum / alone_tokens, abs=1e-5)
    assert abs(crossed_sum - packed_sum) / packed_tokens > 1e-4
