"""GRPO on vision-language models (``method: vl_grpo``): a tiny Qwen2-VL trains on generated image prompts with LoRA
and the vision tower frozen; every forward that samples or scores a completion gets the prompt's pixel inputs;
sampling places tokens where the scoring forward does; exact resume; verl's geometry rows; a missing image."""

from __future__ import annotations

import json

import pytest
import torch

from honing.config import validate
from honing.errors import DataError
from honing.models.wrappers import transformers_model
from honing.recipes.vl_grpo import VLGRPORecipe

COLOURS = {"red": (255, 0, 0), "green": (0, 160, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0)}


def square(path, rgb, size=(56, 56)):
    """A plain image of one colour."""
    from PIL import Image

    Image.new("RGB", size, rgb).save(path)
    return path


def colour_row(image, answer):
    user = [{"type": "image_path", "content": image}, {"type": "text", "content": "What colour?"}]
    return {"prompt": [{"role": "user", "content": user}], "answer": answer}


def write_rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def colours(tmp_path):
    """4 prompts: a coloured square (two sizes, so prompts differ in image tokens) and "What colour?"."""
    rows = []
    for index, (name, rgb) in enumerate(COLOURS.items()):
        square(tmp_path / f"{name}.png", rgb, (56, 56) if index % 2 else (84, 56))
        rows.append(colour_row(f"{name}.png", name))
    return write_rows(tmp_path / "colours.jsonl", rows)


def vl_grpo_config(tmp_path, data_path, steps=3, trainer=None, model_type="qwen2_vl", **grpo):
    return validate(
        {
            "method": "vl_grpo",
            "trainer": {
                "save_folder": str(tmp_path / "run"),
                "max_duration": f"{steps}steps",
                "num_threads": 1,
                "metrics_collect_interval": 1,
                **(trainer or {}),
            },
            "data": {
                "train": {"sources": [{"path": str(data_path)}]},
                "seq_len": 160 if model_type.startswith("qwen") else 256,
                "global_batch_size": 2,
                "micro_batch_size": 1,
                "cache_dir": str(tmp_path / "cache"),
            },
            "model": {"config": {"model_type": model_type}, "lora": {"rank": 4, "alpha": 8}},
            "optim": {"lr": 1e-2},
            "grpo": {
                "num_generations": 4,
                "max_completion_length": 6,
                "rewards": [{"name": "exact_answer"}, {"name": "answer_similarity"}],
                **grpo,
            },
            "callbacks": {"sample": {"enabled": False}, "console": {"enabled": False}},
        }
    )


def metrics(save_folder):
    return [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]


def pixel_forwards(model):
    """Record, per forward of the transformers model, whether it got pixel_values (sampling and scoring alike)."""
    seen = []
    transformers_model(model).register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("pixel_values") is not None), with_kwargs=True
    )
    return seen


def test_lora_run_trains_with_pixels_in_every_forward_and_the_tower_frozen(tmp_path, colours, monkeypatch):
    from honing.methods.grpo_logps import CompletionLogps

    recipe = VLGRPORecipe(vl_grpo_config(tmp_path, colours, beta=0.1, num_iterations=2))
    scored = []
    original = CompletionLogps.__call__

    def recording(self, model, micro):
        inputs = self.model_inputs(micro)
        # one image per completion: its grid says how many merged patches its image tokens are
        expected = (micro["input_ids"] == image_pad).sum()
        scored.append(int(inputs["image_grid_thw"].prod(-1).sum()) // 4 == int(expected))
        return original(self, model, micro)

    monkeypatch.setattr(CompletionLogps, "__call__", recording)
    trainer = recipe.build()
    image_pad = recipe.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    seen = pixel_forwards(recipe.model)
    before = {name: p.detach().clone() for name, p in recipe.model.named_parameters()}
    trainer.fit()
    assert trainer.global_step == 3
    # per step: 1 prefill with pixels and decode steps without; old-policy, reference and 2 policy passes with pixels
    assert any(seen) and not all(seen)
    # per step, for each of 2 micro-batches: the old policy, the reference and 2 policy passes (num_iterations 2)
    assert len(scored) == 3 * 2 * 4 and all(scored)
    rows = metrics(tmp_path / "run")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in ("train/loss", "train/reward", "train/rewards/exact_answer/mean", "train/kl"):
        assert all(key in row for row in rows), key
    changed = [name for name, p in recipe.model.named_parameters() if not torch.equal(before[name], p.detach())]
    assert changed and all("lora_" in name for name in changed)
    assert not any("visual" in name for name in changed)


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_sampling_places_tokens_where_the_scoring_forward_does(tmp_path, colours, model_type):
    """The decoder's logits (prefill with pixels, then one token at a time) equal the full forward's over the same
    left-padded prompts + completion: M-RoPE positions, image features and padding agree."""
    from honing.methods.grpo_vision import joined_image_inputs
    from honing.models.vl_decoding import VisionDecoder

    recipe = VLGRPORecipe(vl_grpo_config(tmp_path, colours, model_type=model_type))
    recipe.build()
    module = recipe.train_module
    batch = next(iter(recipe.train_loader))
    prompt_ids, prompt_mask = batch["input_ids"], batch["attention_mask"]
    assert (prompt_mask == 0).any()  # the two images differ in size: one prompt is left-padded
    completion, completion_mask = module.sampler.sample(
        batch, prompt_ids, prompt_mask, [1, 2], temperature=1.0, top_p=1.0, top_k=0
    )
    micro = {
        "input_ids": torch.cat([prompt_ids, completion], 1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], 1),
        "completion_ids": completion,
        "completion_mask": completion_mask,
    }
    model = transformers_model(recipe.model).eval()
    inputs = joined_image_inputs(recipe.family, batch["image_inputs"], prompt_ids.shape[1], micro["input_ids"].shape[1])
    with torch.no_grad():
        full = model(input_ids=micro["input_ids"], attention_mask=micro["attention_mask"], **inputs).logits
        prompt_inputs = joined_image_inputs(
            recipe.family, batch["image_inputs"], prompt_ids.shape[1], prompt_ids.shape[1]
        )
        decoder = VisionDecoder(model, prompt_inputs)
        stepped = [decoder.prefill(prompt_ids, prompt_mask, completion.shape[1])]
        for column in range(completion.shape[1] - 1):
            stepped.append(decoder.step(completion[:, column]))
    width = prompt_ids.shape[1]
    for column, logits in enumerate(stepped):
        alive = completion_mask[:, column].bool()
        torch.testing.assert_close(logits[alive], full[alive, width - 1 + column], rtol=1e-4, atol=1e-4)
    # the image placeholders are never sampled (a sampled one would be an image slot with no image behind it)
    image_pad = recipe.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    with torch.no_grad():
        blocked = VisionDecoder(model, prompt_inputs, blocked_token_ids=[image_pad])
        assert torch.isneginf(blocked.prefill(prompt_ids, prompt_mask, 1)[:, image_pad]).all()
    assert module.sampler.image_token_ids and image_pad in module.sampler.image_token_ids
    # the same completions come out of the sampler given the same seeds (what a resumed run relies on)
    again, _ = module.sampler.sample(batch, prompt_ids, prompt_mask, [1, 2], temperature=1.0, top_p=1.0, top_k=0)
    assert torch.equal(again, completion)


@pytest.mark.parametrize("model_type", ["llava", "molmo2"])
def test_the_generic_path_and_molmo2_train_with_pixels(tmp_path, colours, model_type):
    """Families without 3-D positions (llava through the generic path, Molmo2 with its crops and pooling indices)."""
    recipe = VLGRPORecipe(vl_grpo_config(tmp_path, colours, steps=1, model_type=model_type))
    trainer = recipe.build()
    seen = pixel_forwards(recipe.model)
    trainer.fit()
    assert trainer.global_step == 1 and any(seen)
    [row] = metrics(tmp_path / "run")
    assert row["train/loss"] == row["train/loss"]  # finite, not NaN


def test_exact_resume_with_refilled_groups_ends_bit_identical(tmp_path, colours):
    """Stopped after step 2 and resumed: the same weights and losses as a run that never stopped, with dynamic
    sampling refilling groups of equal rewards from other image prompts (their pixels kept with their rows)."""
    refill = {"filter_groups": {"enable": True, "max_num_gen_batches": 3}}
    reference = VLGRPORecipe(vl_grpo_config(tmp_path / "ref", colours, steps=4, **refill))
    reference.run()
    stopped = VLGRPORecipe(
        vl_grpo_config(tmp_path / "run", colours, steps=4, trainer={"hard_stop": "2steps"}, **refill)
    )
    assert stopped.run().global_step == 2
    resumed = VLGRPORecipe(vl_grpo_config(tmp_path / "run", colours, steps=4, **refill))
    assert resumed.run().global_step == 4
    left = transformers_model(reference.model).state_dict()
    right = transformers_model(resumed.model).state_dict()
    assert sorted(left) == sorted(right)
    assert not [name for name in left if not torch.equal(left[name], right[name])]
    rows = [metrics(folder / "run") for folder in (tmp_path / "ref", tmp_path / "run")]
    assert [row["train/loss"] for row in rows[0]] == [row["train/loss"] for row in rows[1]]
    assert any(row["train/dynamic_sampling/refill_prompts"] > 0 for row in rows[0])


def exact_ground_truth(data_source, solution_str, ground_truth, extra_info=None):
    """A verl compute_score: 1 when the completion is the ground truth."""
    return float(solution_str.strip() == str(ground_truth))


def test_verl_geometry_rows_are_read_and_trained(tmp_path):
    """verl's geometry3k shape: a user message with an <image> placeholder, an images list, the ground truth under
    reward_model, data_source and extra_info; read as an image prompt whose columns the verl reward reads."""
    from honing.data.prompts.vision_prompts import read_vision_prompt_sources

    rows = []
    for index, (name, rgb) in enumerate(COLOURS.items()):
        square(tmp_path / f"geo{index}.png", rgb)
        rows.append(
            {
                "data_source": "hiyouga/geometry3k",
                "prompt": [{"role": "user", "content": "<image>Which colour is the figure? Answer in one word."}],
                "images": [{"image": f"geo{index}.png"}] if index % 2 else [f"geo{index}.png"],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": name},
                "extra_info": {"split": "train", "index": index},
            }
        )
    path = write_rows(tmp_path / "geo.jsonl", rows)
    found = read_vision_prompt_sources([{"path": str(path)}])[0]
    (conversation, columns), origin = found[1]
    assert origin.endswith("geo.jsonl:2")
    [item] = conversation.images()
    assert item.type == "image_path" and item.content == str(tmp_path / "geo1.png")
    assert conversation.messages[0].items()[1].content == "Which colour is the figure? Answer in one word."
    assert columns["reward_model"]["ground_truth"] == "green" and columns["data_source"] == "hiyouga/geometry3k"
    rewards = [{"name": "tests.recipes.test_grpo_vision:exact_ground_truth"}]
    recipe = VLGRPORecipe(vl_grpo_config(tmp_path, path, steps=1, rewards=rewards))
    assert recipe.run().global_step == 1
    [row] = metrics(tmp_path / "run")
    assert 0.0 <= row["train/reward"] <= 1.0


def test_a_missing_image_is_refused_naming_the_row_and_file(tmp_path, colours):
    rows = colours.read_text().splitlines()
    rows[1] = json.dumps(colour_row("missing.png", "green"))
    write_rows(colours, [json.loads(row) for row in rows])
    with pytest.raises(DataError, match=r"colours\.jsonl:2: .*missing\.png"):
        VLGRPORecipe(vl_grpo_config(tmp_path, colours)).run()


def test_an_oumi_verl_grpo_config_on_image_data_translates_to_vl_grpo():
    from honing.interop.configs import translate

    raw = {
        "model": {"model_name": "Qwen/Qwen2-VL-2B-Instruct", "processor_kwargs": {"max_pixels": 3136}},
        "data": {"train": {"datasets": [{"dataset_name": "hiyouga/geometry3k", "split": "train"}]}},
        "training": {"trainer_type": "VERL_GRPO", "reward_functions": ["gsm8k"], "use_peft": True},
        "peft": {"lora_r": 8},
    }
    translation = translate(raw)
    assert translation.refused == []
    config = validate(translation.config)
    assert config.method == "vl_grpo" and config.data.max_pixels == 3136
    assert config.grpo.rewards[0].name == "verl:gsm8k"
    # no target_modules: the recipe adapts the language model's linears only, as VL-SFT does
    assert config.model.lora.rank == 8 and "target_modules" not in config.model.lora.model_fields_set
