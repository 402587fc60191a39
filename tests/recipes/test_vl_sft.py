"""Vision-language SFT through the whole recipe: per family, the rows equal the family's own processor output and only
the assistant text carries loss; LoRA export, exact resume, bad images, over-long rows, freezing and refusals."""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path

import pytest
import torch

from honing.config import validate
from honing.errors import ConfigError, DataError
from honing.methods.lm import LMTrainModule
from honing.recipes.vl_sft import VISION_EXTRA, VLSFTRecipe

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "molmo2", "llava")
ANSWERS = ("A zero.", "A one.")
IMAGE_SIZES = ((56, 56), (84, 56))  # two shapes: the two images expand to different token counts


def draw(path, text, size=(56, 56)):
    """A white image with ``text`` drawn in black (PIL's default font)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((4, 8), text, fill="black")
    image.save(path)
    return path


def two_turn_row(first, second):
    """Two user turns with one image each (before and after the text), two assistant answers."""
    image = [{"type": "image_path", "content": first}, {"type": "text", "content": "What?"}]
    image_after = [{"type": "text", "content": "And this?"}, {"type": "image_path", "content": second}]
    return {
        "messages": [
            {"role": "user", "content": image},
            {"role": "assistant", "content": ANSWERS[0]},
            {"role": "user", "content": image_after},
            {"role": "assistant", "content": ANSWERS[1]},
        ]
    }


def one_image_row(image, answer, prompt="Read it."):
    user = [{"type": "image_path", "content": image}, {"type": "text", "content": prompt}]
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def write_rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def conversations(tmp_path):
    """4 two-turn rows, each with two images (paths relative to the data file)."""
    for index in range(4):
        for turn, size in enumerate(IMAGE_SIZES):
            draw(tmp_path / f"img{index}_{turn}.png", f"{index}{turn}", size)
    return write_rows(tmp_path / "train.jsonl", [two_turn_row(f"img{i}_0.png", f"img{i}_1.png") for i in range(4)])


@pytest.fixture
def transcriptions(tmp_path):
    """8 one-image rows: an image of a 3-digit string and the string."""
    rows = []
    for index in range(8):
        text = f"{index * 37 % 1000:03d}"
        draw(tmp_path / f"digits{index}.png", text, (56, 28))
        rows.append(one_image_row(f"digits{index}.png", text))
    return write_rows(tmp_path / "digits.jsonl", rows)


def vl_config(tmp_path, data_path, model_type="qwen2_vl", steps=2, **sections):
    raw = {
        "method": "vl_sft",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": f"{steps}steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": str(data_path)}]},
            "seq_len": 128,
            "global_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": {"model_type": model_type}},
        "optim": {"lr": 1e-2},
        "callbacks": {
            "checkpointer": {"save_interval": 100},
            "evaluator": {"enabled": False},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(raw.get(section, {}).get(key), dict):
                raw[section][key].update(value)
            else:
                raw.setdefault(section, {})[key] = value
    return validate(raw)


def losses(save_folder):
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["train/loss"] for row in rows if "train/loss" in row}


@pytest.fixture
def batches(monkeypatch):
    """Every batch a train module trains on, in order (its token ids and pixels)."""
    seen = []
    train_batch = LMTrainModule.train_batch

    def recording(self, batch, dry_run=False):
        seen.append({key: batch[key].clone() for key in ("input_ids", "labels", "pixel_values") if key in batch})
        return train_batch(self, batch, dry_run)

    monkeypatch.setattr(LMTrainModule, "train_batch", recording)
    return seen


@pytest.fixture
def weights_before_training(monkeypatch):
    """The model's weights as the first batch arrives (after any freezing, before any update)."""
    snapshot = {}
    train_batch = LMTrainModule.train_batch

    def first(self, batch, dry_run=False):
        if not snapshot:
            snapshot.update(
                {name: value.detach().clone() for name, value in unwrapped(self.model).state_dict().items()}
            )
        return train_batch(self, batch, dry_run)

    monkeypatch.setattr(LMTrainModule, "train_batch", first)
    return snapshot


def unwrapped(model):
    from honing.models.wrappers import transformers_model

    return transformers_model(model)


def labelled_spans(tokenizer, input_ids, labels):
    """The decoded runs of consecutive labelled tokens."""
    spans, current = [], []
    for token, label in zip(input_ids, labels):
        if label != -100:
            assert label == token  # labels sit on their own token (the loss shifts them)
            current.append(label)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    return spans


# --- per family ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_rows_equal_its_processor_and_only_answers_get_loss(tmp_path, conversations, model_type):
    from PIL import Image
    from transformers import AutoProcessor

    from honing.data.vision.processing import image_token_ids
    from honing.models.tiny_vl import build_tiny_processor, tiny_family

    recipe = VLSFTRecipe(vl_config(tmp_path, conversations, model_type, data={"seq_len": 192}))
    trainer = recipe.run()
    assert trainer.global_step == 2
    run_losses = losses(tmp_path / "run")
    assert 2 in run_losses and all(math.isfinite(loss) for loss in run_losses.values())
    dataset, tokenizer = recipe.train_loader.dataset, recipe.tokenizer
    example = dataset.examples[0]
    assert recipe.data_reports["train"].images_per_example == [2] * 4

    # labels: the two answers and their end-of-turn token, nothing of the prompts or the images
    end_of_turn = tiny_family(model_type).eos_token
    assert labelled_spans(tokenizer, example.input_ids, example.labels) == [a + end_of_turn for a in ANSWERS]
    assert example.image_tokens > 0

    # the ids (and pixels) the family's own processor gives for the same messages with the same images
    processor = AutoProcessor.from_pretrained(build_tiny_processor(model_type, str(tmp_path / "processor")))
    assert [item.content.rsplit("/", 1)[-1] for item in example.images] == ["img0_0.png", "img0_1.png"]
    images = [Image.open(tmp_path / f"img0_{turn}.png").convert("RGB") for turn in range(2)]
    messages = [
        {"role": "user", "content": [{"type": "image", "image": images[0]}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": ANSWERS[0]}]},
        {"role": "user", "content": [{"type": "text", "text": "And this?"}, {"type": "image", "image": images[1]}]},
        {"role": "assistant", "content": [{"type": "text", "text": ANSWERS[1]}]},
    ]
    expected = processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt")
    assert expected["input_ids"][0].tolist() == example.input_ids
    # image content: the image token ids, and what the processor marks as image tokens (Molmo2's patch tokens)
    blocked = image_token_ids(processor)
    image_positions = {i for i, token in enumerate(example.input_ids) if token in blocked}
    if "mm_token_type_ids" in expected:
        image_positions |= {i for i, kind in enumerate(expected["mm_token_type_ids"][0].tolist()) if kind}
    assert len(image_positions) >= 2 and all(example.labels[i] == -100 for i in image_positions)
    # the micro-batch the collator makes of that row (one processor call per micro-batch)
    row = recipe.collator.split(recipe.collator([dataset[0]]), 1)[0]
    for key in recipe.collator.model_input_keys:
        if key in expected:
            assert torch.equal(row[key], expected[key]), key


@pytest.mark.parametrize("model_type", FAMILIES)
def test_train_on_all_labels_every_text_token_and_no_image_token(tmp_path, transcriptions, model_type):
    # Molmo2's processor replaces the template's <|image|> by other tokens: its plain label must not be looked for
    from honing.data.vision.processing import image_token_ids

    recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions, model_type, data={"train_on": "all"}))
    assert recipe.run().global_step == 2
    example = recipe.train_loader.dataset.examples[0]
    blocked = image_token_ids(recipe.processor)
    labelled = [i for i, label in enumerate(example.labels) if label != -100]
    assert labelled and not any(example.input_ids[i] in blocked for i in labelled)
    # every position but the image content trains, the prompt's text included
    assert len(labelled) == len(example.input_ids) - example.image_tokens


# --- LoRA export --------------------------------------------------------------------------------------------------
def test_lora_merged_export_equals_the_adapted_model_and_generates(tmp_path, transcriptions):
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions))
    recipe.run()
    adapted = recipe.model.eval()
    assert any("lora_B" in name and value.abs().sum() > 0 for name, value in adapted.named_parameters())
    hf = tmp_path / "run" / "hf"
    processor = AutoProcessor.from_pretrained(hf)
    merged = AutoModelForImageTextToText.from_pretrained(hf).eval()
    assert not any("lora" in name for name in merged.state_dict())
    image = Image.open(draw(tmp_path / "new.png", "482", (56, 28))).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read it."}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    assert int((inputs["input_ids"] == processor.image_token_id).sum()) > 0
    with torch.no_grad():
        torch.testing.assert_close(merged(**inputs).logits, adapted(**inputs).logits, atol=1e-5, rtol=0)
        out = merged.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]
    assert isinstance(processor.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True), str)


# --- exact resume -------------------------------------------------------------------------------------------------
def test_exact_resume_mid_epoch_sees_the_same_batches_and_ends_bit_identical(tmp_path, transcriptions, batches):
    # 8 rows / 2 per batch: 4 batches per epoch; stop after 3 (mid-epoch), resume to 6 (into the second epoch)
    reference = VLSFTRecipe(vl_config(tmp_path / "ref", transcriptions, steps=6))
    reference.run()
    straight = list(batches)
    batches.clear()
    stopped = VLSFTRecipe(vl_config(tmp_path / "run", transcriptions, steps=6, trainer={"hard_stop": "3steps"}))
    assert stopped.run().global_step == 3
    assert (tmp_path / "run" / "run" / "step3").is_dir()
    resumed = VLSFTRecipe(vl_config(tmp_path / "run", transcriptions, steps=6))
    assert resumed.run().global_step == 6
    assert len(straight) == len(batches) == 6
    for index, (left, right) in enumerate(zip(straight, batches)):
        assert sorted(left) == sorted(right)
        for key in left:
            assert torch.equal(left[key], right[key]), (index, key)
    left, right = unwrapped(reference.model).state_dict(), unwrapped(resumed.model).state_dict()
    assert sorted(left) == sorted(right)
    assert not [name for name in left if not torch.equal(left[name], right[name])]
    assert losses(tmp_path / "run" / "run") == losses(tmp_path / "ref" / "run")


# --- bad images ---------------------------------------------------------------------------------------------------
@pytest.fixture
def bad_images(tmp_path, transcriptions):
    """The 8 good rows with three bad ones at lines 2, 5 and 8: a missing file, a corrupt PNG, a PDF page past the
    end of a 1-page PDF."""
    from PIL import Image

    (tmp_path / "corrupt.png").write_bytes(draw(tmp_path / "whole.png", "1").read_bytes()[:60])
    Image.new("RGB", (56, 56), "white").save(tmp_path / "one_page.pdf")
    good = [json.loads(line) for line in transcriptions.read_text().splitlines()]
    pdf_row = one_image_row("one_page.pdf", "3")
    pdf_row["messages"][0]["content"][0] = {"type": "pdf", "content": "one_page.pdf", "page": 3}
    rows = good[:1] + [one_image_row("missing.png", "1")] + good[1:3] + [one_image_row("corrupt.png", "2")]
    rows += good[3:5] + [pdf_row] + good[5:]
    return write_rows(tmp_path / "bad.jsonl", rows)


BAD_REASONS = {
    2: r"bad\.jsonl:2: .*missing\.png.*not found",
    5: r"bad\.jsonl:5: .*corrupt\.png.*corrupt image data",
    8: r"bad\.jsonl:8: .*one_page\.pdf.* page 3.*has 1 page; page 3 was asked",
}


def test_bad_images_name_the_file_line_and_reason(tmp_path, bad_images):
    lines = bad_images.read_text().splitlines()
    for line, reason in BAD_REASONS.items():
        alone = write_rows(tmp_path / "bad.jsonl", [json.loads(lines[0])] * (line - 1) + [json.loads(lines[line - 1])])
        with pytest.raises(DataError, match=reason) as info:
            VLSFTRecipe(vl_config(tmp_path, alone)).run()
        assert "\n" not in str(info.value)


def test_bad_images_are_skipped_and_counted_under_bad_rows_skip(tmp_path, bad_images):
    import re

    recipe = VLSFTRecipe(vl_config(tmp_path, bad_images, data={"bad_rows": "skip"}))
    assert recipe.run().global_step == 2
    report = recipe.data_reports["train"]
    assert report.rejected == 3 and report.examples == 8
    for reason, pattern in zip(report.reasons, BAD_REASONS.values()):
        assert re.search(pattern, reason), reason


# --- over-long rows -----------------------------------------------------------------------------------------------
# Qwen-VL places each image where its slot is (after the long prompt); Molmo2 places every image first, so its row
# is cut through its images by a shorter seq_len.
@pytest.mark.parametrize("model_type, seq_len", [("qwen2_vl", 128), ("molmo2", 96)])
def test_truncation_through_an_image_is_refused_or_dropped(tmp_path, transcriptions, model_type, seq_len):
    long_row = one_image_row("digits0.png", "000")
    image = long_row["messages"][0]["content"][0]
    long_row["messages"][0]["content"][:1] = [{"type": "text", "content": "x" * 150}, image, image, image]
    rows = [json.loads(line) for line in transcriptions.read_text().splitlines()]
    path = write_rows(tmp_path / "long.jsonl", rows[:3] + [long_row] + rows[3:])
    data = {"seq_len": seq_len}
    with pytest.raises(DataError, match=r"long\.jsonl:4: .*truncating would cut an image") as info:
        VLSFTRecipe(vl_config(tmp_path, path, model_type, data=data)).run()
    assert "data.overlong: drop" in str(info.value) and "\n" not in str(info.value)
    recipe = VLSFTRecipe(vl_config(tmp_path, path, model_type, data={**data, "overlong": "drop"}))
    assert recipe.run().global_step == 2
    report = recipe.data_reports["train"]
    assert report.dropped == 1 and report.rejected == 0 and report.examples == 8


# --- freezing and the vision learning rate --------------------------------------------------------------------------
def parts(recipe, part):
    from honing.models.vl_families import module_part

    return [name for name, _ in unwrapped(recipe.model).named_parameters() if module_part(recipe.family, name) == part]


def changed(recipe, before, names):
    after = unwrapped(recipe.model).state_dict()
    return {name for name in names if not torch.equal(before[name], after[name])}


def test_full_fine_tuning_keeps_the_vision_tower_frozen_by_default(tmp_path, transcriptions, weights_before_training):
    recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions, model={"lora": None}))
    recipe.run()
    vision, projector, language = (parts(recipe, part) for part in ("vision", "projector", "language"))
    assert vision and projector and language
    assert not changed(recipe, weights_before_training, vision)
    assert changed(recipe, weights_before_training, projector) == set(projector)  # the merger trains
    assert changed(recipe, weights_before_training, language)
    assert not any(p.requires_grad for n, p in unwrapped(recipe.model).named_parameters() if n in vision)
    assert recipe.train_module.collator.sdpa_masks  # sdpa attention: padded batches carry their 4-D causal mask


def test_vision_lr_group_and_frozen_projector(tmp_path, transcriptions, weights_before_training, caplog):
    recipe = VLSFTRecipe(
        vl_config(
            tmp_path,
            transcriptions,
            model={"lora": None, "freeze_vision": False, "freeze_projector": True},
            optim={"vision_lr": 1e-3},
            scheduler={"name": "constant", "warmup_steps": 0},
        )
    )
    with caplog.at_level(logging.WARNING, logger="honing.recipes.vl_sft"):
        recipe.run()
    # a random tower trained from scratch is warned about once
    (warning,) = [r.getMessage() for r in caplog.records if "tends to collapse" in r.getMessage()]
    assert "\n" not in warning
    vision, projector = parts(recipe, "vision"), parts(recipe, "projector")
    parameters = dict(unwrapped(recipe.model).named_parameters())
    # the vision tower's own groups (split by weight decay as every group is), at optim.vision_lr
    groups = recipe.trainer.train_module.optimizer.param_groups
    vision_lr = [group for group in groups if group["lr"] == pytest.approx(1e-3)]
    assert vision_lr and sorted({group["lr"] for group in groups}) == pytest.approx([1e-3, 1e-2])
    assert {id(p) for group in vision_lr for p in group["params"]} == {id(parameters[name]) for name in vision}
    assert changed(recipe, weights_before_training, vision) == set(vision)  # the tower trains
    assert not changed(recipe, weights_before_training, projector)  # the merger does not
    assert not any(parameters[name].requires_grad for name in projector)


# --- refusals -----------------------------------------------------------------------------------------------------
def test_vision_lr_under_text_sft_is_refused(tmp_path):
    raw = {
        "method": "sft",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "2steps"},
        "data": {"train": {"sources": [{"path": "generated:reverse?samples=8&seed=0"}]}},
        "model": {"config": {"model_type": "llama"}},
        "optim": {"vision_lr": 1e-3},
    }
    with pytest.raises(ConfigError, match="optim.vision_lr") as info:
        validate(raw)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("model_type", ["molmo2", "llava"])
def test_packing_is_refused_for_a_family_without_it(tmp_path, transcriptions, model_type):
    with pytest.raises(ConfigError, match=f"data.packing: .*{model_type}") as info:
        VLSFTRecipe(vl_config(tmp_path, transcriptions, model_type, data={"packing": True})).run()
    assert "\n" not in str(info.value)


def test_without_torchvision_a_vl_config_names_the_extra(tmp_path, transcriptions, monkeypatch, capsys):
    from honing.cli import main

    config = tmp_path / "vl.yaml"
    config.write_text(json.dumps(vl_config(tmp_path, transcriptions).model_dump(mode="json", exclude_unset=True)))
    monkeypatch.setitem(sys.modules, "torchvision", None)  # `import torchvision` raises ImportError
    assert main(["train", str(config)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("honing: error: ") and VISION_EXTRA in error and "\n" not in error


# --- the shared data set ------------------------------------------------------------------------------------------
def test_llama_factory_mllm_demo_trains_with_no_rejected_row(tmp_path):
    demo = Path(__file__).resolve().parents[3] / "shared" / "data" / "mllm_demo" / "mllm_demo.json"
    if not demo.exists():
        pytest.skip(f"{demo} is not on this machine")
    recipe = VLSFTRecipe(vl_config(tmp_path, demo, data={"seq_len": 512, "bad_rows": "skip"}))
    trainer = recipe.run()
    report = recipe.data_reports["train"]
    assert report.rejected == 0 and report.dropped == 0 and report.examples == 6
    assert sum(report.images_per_example) == 8  # two rows show a picture in each of their two user turns
    assert trainer.global_step == 2 and all(math.isfinite(loss) for loss in losses(tmp_path / "run").values())


def test_pdf_pages_render_at_the_configured_longest_side(tmp_path, transcriptions):
    from PIL import Image

    from honing.data.formats import ContentItem

    pdf = tmp_path / "page.pdf"
    Image.new("L", (100, 50), 255).save(pdf, format="PDF")
    page = ContentItem(type="pdf", content=str(pdf), page=1)
    for longest_side, size in ((None, (100, 50)), (300, (300, 150))):  # None: 72 dpi
        recipe = VLSFTRecipe(vl_config(tmp_path, transcriptions, data={"pdf_longest_side": longest_side}))
        assert recipe.row_kind(recipe.model_assets()).load_image(page).size == size
