"""DPO on vision-language models (``method: vl_dpo``): a tiny Qwen2-VL trains on generated image pairs with LoRA;
step 1's loss is log 2 (policy = reference); each reply is scored as in its own sequence with the prompt's pixels;
TRL's, Oumi's and RLAIF-V's row shapes; a missing image is refused naming its row; packed pairs are refused."""

from __future__ import annotations

import json
import math

import pytest
import torch

from honing.config import validate
from honing.errors import ConfigError, DataError
from honing.methods.pairs import pair_scores
from honing.recipes.vl_dpo import VLDPORecipe

COLOURS = {"red": (255, 0, 0), "green": (0, 160, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0)}


def square(path, rgb, size=(56, 56)):
    """A plain image of one colour."""
    from PIL import Image

    Image.new("RGB", size, rgb).save(path)
    return path


def write_rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def colour_pairs(folder, shape="trl"):
    """4 pairs: a coloured square (two sizes, so prompts differ in image tokens), its name chosen over another's."""
    names, rows = list(COLOURS), []
    for index, (name, rgb) in enumerate(COLOURS.items()):
        square(folder / f"{name}.png", rgb, (56, 56) if index % 2 else (84, 56))
        wrong = names[(index + 1) % len(names)]
        if shape == "trl":  # TRL's conversational vision rows: {"type": "image"} slots filled from images
            user = [{"type": "image"}, {"type": "text", "text": "What colour is this?"}]
            reply = lambda text: [{"role": "assistant", "content": [{"type": "text", "text": text}]}]  # noqa: E731
            rows.append(
                {"images": [f"{name}.png"], "prompt": [{"role": "user", "content": user}], "chosen": reply(name),
                 "rejected": reply(wrong)}
            )  # fmt: skip
        elif shape == "oumi":  # Oumi's vision_dpo_jsonl
            rows.append(
                {"prompt": "What colour is this?", "images": [f"{name}.png"],
                 "chosen": [{"role": "assistant", "content": name}],
                 "rejected": [{"role": "assistant", "content": wrong}]}
            )  # fmt: skip
        else:  # RLAIF-V: one image, a question, string replies
            rows.append(
                {"image": {"path": f"{name}.png"}, "question": "What colour?", "chosen": name, "rejected": wrong}
            )
    return write_rows(folder / f"pairs-{shape}.jsonl", rows)


def vl_dpo_config(tmp_path, data_path, steps=3, name="run", model_type="qwen2_vl", **dpo):
    return validate(
        {
            "method": "vl_dpo",
            "trainer": {
                "save_folder": str(tmp_path / name),
                "max_duration": f"{steps}steps",
                "num_threads": 1,
                "metrics_collect_interval": 1,
            },
            "data": {
                "train": {"sources": [{"path": str(data_path)}]},
                "seq_len": 160,
                "global_batch_size": 4,
                "micro_batch_size": 2,
                "cache_dir": str(tmp_path / "cache"),
            },
            "model": {"config": {"model_type": model_type}, "lora": {"rank": 4, "alpha": 8}},
            "optim": {"lr": 5e-3},
            "dpo": {"beta": 0.5, **dpo},
            "callbacks": {"sample": {"enabled": False}, "console": {"enabled": False}},
        }
    )


def train_rows(save_folder):
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "train/loss" in row]


@pytest.mark.parametrize("reference", ["adapters_off", "copy"])
def test_tiny_qwen2_vl_trains_three_steps_from_log_2(tmp_path, reference):
    data = colour_pairs(tmp_path)
    VLDPORecipe(vl_dpo_config(tmp_path, data, reference=reference)).run()
    rows = train_rows(tmp_path / "run")
    assert len(rows) == 3
    # DPO's closed form: policy = reference at step 1, so every margin is 0 and the loss is -log σ(0) = log 2
    assert rows[0]["train/loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert rows[0]["train/rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]  # the policy moves towards the chosen replies
    assert all(math.isfinite(row["train/logps/chosen"]) for row in rows)
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").exists()


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "llava", "idefics3", "molmo2"])
def test_other_families_start_from_log_2(tmp_path, model_type):
    """Each family's pixel inputs (patches, images, per-row stacks, crops with pooling indices) reach both rows."""
    VLDPORecipe(vl_dpo_config(tmp_path, colour_pairs(tmp_path), steps=2, model_type=model_type, reference="copy")).run()
    rows = train_rows(tmp_path / "run")
    assert len(rows) == 2 and rows[0]["train/loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert math.isfinite(rows[1]["train/loss"])


@pytest.mark.parametrize("model_type", ["qwen2_vl", "llava", "idefics3", "molmo2"])
def test_each_reply_is_scored_as_in_its_own_sequence_with_the_prompt_pixels(tmp_path, model_type):
    """The batched side-by-side log-probs equal those of prompt + reply processed alone by the processor (images
    included): positions, pixel inputs and padding reach the model as in one sequence."""
    recipe = VLDPORecipe(vl_dpo_config(tmp_path, colour_pairs(tmp_path, "oumi"), model_type=model_type))
    recipe.build()
    model, collator, family = recipe.model.eval(), recipe.collator, recipe.family
    dataset = recipe.train_loader.dataset
    items = [dataset[i] for i in range(len(dataset))]
    micro = collator.split(collator(items), len(items))[0]
    with torch.no_grad():
        logps, lengths, _ = pair_scores(model, micro, collator, chunked=False)
    for index, item in enumerate(items):
        prompt = recipe.processor(text=[item["text"]], images=item["images"], return_tensors="pt")
        size = len(item["prompt_ids"])
        for column, reply in enumerate(("chosen_ids", "rejected_ids")):
            ids = torch.cat([prompt["input_ids"][0][:size], torch.tensor(item[reply])])[None]
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            for key in family.model_input_keys:
                if key in family.per_token_keys:  # over the prompt's tokens, 0 over the reply's
                    inputs[key] = torch.zeros_like(ids)
                    inputs[key][0, :size] = prompt[key][0][:size]
                elif key in prompt:
                    inputs[key] = prompt[key]
            with torch.no_grad():
                logits = model(**inputs).logits.float()
            alone = torch.log_softmax(logits[0, size - 1 : -1], -1).gather(-1, ids[0, size:, None]).sum()
            assert lengths[index, column] == len(item[reply])
            assert logps[index, column].item() == pytest.approx(alone.item(), abs=1e-4), (index, column)
    # the pixels matter: other images under the same ids give other log-probs
    swapped = dict(micro, pixel_values=torch.flip(micro["pixel_values"], dims=[0]))
    with torch.no_grad():
        other, _, _ = pair_scores(model, swapped, collator, chunked=False)
    assert not torch.allclose(other, logps)


def test_rlaif_v_rows_train(tmp_path):
    VLDPORecipe(vl_dpo_config(tmp_path, colour_pairs(tmp_path, "rlaif"), steps=1)).run()
    assert train_rows(tmp_path / "run")[0]["train/loss"] == pytest.approx(math.log(2), abs=1e-6)


def test_a_missing_image_is_refused_naming_the_row(tmp_path):
    data = colour_pairs(tmp_path, "oumi")
    (tmp_path / "blue.png").unlink()
    with pytest.raises(DataError, match=r"pairs-oumi\.jsonl:3: .*blue\.png"):
        VLDPORecipe(vl_dpo_config(tmp_path, data)).run()


def test_packed_pairs_are_refused_for_image_pairs(tmp_path):
    with pytest.raises(ConfigError, match="dpo.packed_pairs: true is not available for image pairs"):
        VLDPORecipe(vl_dpo_config(tmp_path, colour_pairs(tmp_path), packed_pairs=True))


def test_text_dpo_refuses_image_keys(tmp_path):
    raw = {
        "method": "dpo",
        "model": {"config": {"model_type": "llama"}},
        "data": {"train": {"sources": [{"path": "x.jsonl"}]}, "max_pixels": 3136},
    }
    with pytest.raises(ConfigError, match="data.max_pixels"):
        validate(raw)
