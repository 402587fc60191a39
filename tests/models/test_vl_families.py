"""Vision-language families: tiny processors round-trip, the chat template and the processor agree, the model sees
the image, module prefixes partition the parameters, LoRA stays in the language model, packed rope positions."""

from __future__ import annotations

import pytest

pytest.importorskip("torchvision", reason="vision-language processors need torchvision (pip install honing[vision])")

import torch  # noqa: E402
from PIL import Image  # noqa: E402

from honing.errors import ConfigError  # noqa: E402
from honing.models.lora import apply_lora  # noqa: E402
from honing.models.param_names import named_parameters  # noqa: E402
from honing.models.tiny_vl import TINY_FAMILIES, build_tiny_processor, tiny_vl_config  # noqa: E402
from honing.models.vl_families import (  # noqa: E402
    FAMILIES,
    LANGUAGE_MODEL_LORA_TARGETS,
    concat_image_inputs,
    family_for,
    lora_targets,
    module_part,
    pixel_entries_per_image,
    position_ids_for_packing,
    set_pixel_limits,
)

MODEL_TYPES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "molmo2", "llava", "idefics3"]
QWEN_TYPES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


def _image(color: tuple[int, int, int], size: tuple[int, int] = (100, 60)) -> Image.Image:
    image = Image.new("RGB", size, color)
    image.paste((255 - color[0], 255 - color[1], 255 - color[2]), (10, 10, 40, 30))  # some structure to look at
    return image


def _messages(image: Image.Image, answer: str = "abc") -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "read it"}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("honing-cache"))


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory, cache_dir: str):
    """Per model type: the reloaded tiny processor and a tiny model (built once per module)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    built = {}

    def get(model_type: str):
        if model_type not in built:
            folder = build_tiny_processor(model_type, str(tmp_path_factory.mktemp(model_type)), cache_dir=cache_dir)
            processor = AutoProcessor.from_pretrained(folder)
            torch.manual_seed(0)
            model = AutoModelForImageTextToText.from_config(tiny_vl_config(model_type, len(processor.tokenizer)))
            built[model_type] = (processor, model.eval())
        return built[model_type]

    return get


def _encode(processor, messages: list[dict]) -> dict:
    return dict(processor.apply_chat_template(messages, tokenize=True, return_dict=True, return_tensors="pt"))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_chat_template_tokenization_equals_processor_call(model_type, assets):
    processor, _ = assets(model_type)
    assert type(processor).__name__.lower().startswith(model_type.replace("_", "")[:5])
    image = _image((200, 30, 30))
    messages = _messages(image)
    # The lead's path: apply_chat_template(tokenize=True) with the assistant mask from the {% generation %} markers.
    encoded = dict(
        processor.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_tensors="pt", return_assistant_tokens_mask=True
        )
    )
    mask = encoded.pop("assistant_masks")
    text = processor.apply_chat_template(messages, tokenize=False)
    direct = dict(processor(text=[text], images=[image], return_tensors="pt"))
    assert encoded.keys() == direct.keys()
    for key in encoded:
        assert torch.equal(torch.as_tensor(encoded[key]), torch.as_tensor(direct[key])), key
    # The loss tokens are the answer and the end of the turn, nothing of the prompt or the image.
    answer = processor.tokenizer.decode(encoded["input_ids"][0][torch.as_tensor(mask[0]).bool()])
    assert answer == "abc" + TINY_FAMILIES[model_type].eos_token


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_image_token_count_matches_the_image_features(model_type, assets):
    processor, model = assets(model_type)
    family = family_for(model_type, model=model, processor=processor)
    images = [_image((0, 90, 200)), _image((10, 10, 10), size=(64, 130))]
    messages = [
        {"role": "user", "content": [{"type": "image", "image": images[0]}, {"type": "image", "image": images[1]}]},
        {"role": "assistant", "content": "two"},
    ]
    encoded = _encode(processor, messages)
    image_tokens = int((encoded["input_ids"] == model.config.image_token_id).sum())
    if model_type in QWEN_TYPES:
        grid = encoded["image_grid_thw"]
        assert image_tokens == int(grid.prod(-1).sum()) // 4  # 2x2 patches merge into one token
        assert pixel_entries_per_image(family, encoded) == grid.prod(-1).tolist()
        assert sum(pixel_entries_per_image(family, encoded)) == encoded["pixel_values"].shape[0]
        # mm_token_type_ids marks exactly the image tokens (the model needs it for 3-D rope positions).
        assert torch.equal(encoded["mm_token_type_ids"].bool(), encoded["input_ids"] == model.config.image_token_id)
    elif model_type == "molmo2":
        grids = encoded["image_grids"]
        assert image_tokens == int((grids[:, 0] * grids[:, 1] + grids[:, 2] * grids[:, 3]).sum())
        assert sum(pixel_entries_per_image(family, encoded)) == encoded["pixel_values"].shape[0]
        assert image_tokens == int((encoded["image_token_pooling"] >= 0).any(-1).sum())
    elif model_type == "llava":
        assert image_tokens == 2 * (56 // 14) ** 2
        assert pixel_entries_per_image(family, encoded) == [1, 1]
    else:  # idefics3: 4x4 patches shuffled 2x2 into 4 tokens per image; images padded per row
        assert image_tokens == 2 * 4
        assert encoded["pixel_values"].shape[:2] == (1, 2) and family.pixel_layout == "rows"
    with torch.no_grad():
        features = model.model.get_image_features(
            **{key: encoded[key] for key in family.model_input_keys if key not in family.per_token_keys}
        ).pooler_output
    features = torch.cat(list(features)) if isinstance(features, (tuple, list)) else features
    assert features.reshape(-1, features.shape[-1]).shape[0] == image_tokens


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_rows_joined_by_the_family_layout_equal_the_processor_on_both_rows(model_type, assets):
    processor, model = assets(model_type)
    family = family_for(model_type, model=model, processor=processor)
    images = [_image((200, 0, 0)), _image((0, 200, 0), size=(140, 50))]
    rows = [_encode(processor, _messages(image)) for image in images]
    texts = [processor.apply_chat_template(_messages(image), tokenize=False) for image in images]
    both = processor(text=texts, images=[[image] for image in images], padding=True, return_tensors="pt")
    joined = concat_image_inputs(family, rows)
    assert joined.keys() == {key for key in family.model_input_keys if key not in family.per_token_keys}
    for key, value in joined.items():
        assert torch.equal(value, torch.as_tensor(both[key])), key
    for key in family.per_token_keys:  # laid out like input_ids, padded with 0 (right padding here)
        width = both["input_ids"].shape[1]
        padded = [torch.nn.functional.pad(row[key], (0, width - row[key].shape[1])) for row in rows]
        assert torch.equal(torch.cat(padded), both[key]), key


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_forward_with_labels_gives_a_finite_loss_and_sees_the_image(model_type, assets):
    processor, model = assets(model_type)
    family = family_for(model_type, model=model, processor=processor)
    logits = []
    for color in ((220, 20, 20), (20, 20, 220)):
        encoded = _encode(processor, _messages(_image(color)))
        inputs = {key: encoded[key] for key in ("input_ids", "attention_mask", *family.model_input_keys)}
        with torch.no_grad():
            output = model(**inputs, labels=encoded["input_ids"])
        assert torch.isfinite(output.loss)
        logits.append(output.logits)
    assert (logits[0] - logits[1]).abs().max() > 1e-3, "the logits do not depend on the image"


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_module_prefixes_cover_every_parameter_exactly_once(model_type, assets):
    processor, model = assets(model_type)
    family = family_for(model_type, model=model, processor=processor)
    assert family.generic == (model_type not in FAMILIES)
    prefixes = family.vision_modules + family.projector_modules + family.language_modules
    parts = {"vision": 0, "projector": 0, "language": 0}
    for name, _ in named_parameters(model):
        matching = [prefix for prefix in prefixes if name == prefix or name.startswith(prefix + ".")]
        assert len(matching) == 1, (name, matching)
        parts[module_part(family, name)] += 1
    assert all(parts.values()), parts


@pytest.mark.parametrize(
    ("model_type", "parts", "keys", "layout"),
    [
        (
            "llava",
            ("model.vision_tower", "model.multi_modal_projector", "model.language_model"),
            ("pixel_values",),
            "images",
        ),
        (
            "idefics3",
            ("model.vision_model", "model.connector", "model.text_model"),
            ("pixel_values", "pixel_attention_mask"),
            "rows",
        ),
    ],
)
def test_the_generic_family_is_derived_from_the_modules_and_processor(model_type, parts, keys, layout, assets):
    processor, model = assets(model_type)
    assert model_type not in FAMILIES
    family = family_for(model_type, model=model, processor=processor)
    assert family.generic and not family.packing
    assert (family.vision_modules, family.projector_modules) == ((parts[0],), (parts[1],))
    assert family.language_modules == (parts[2], "lm_head")
    assert family.model_input_keys == keys
    assert family.pixel_layout == layout and family.image_token == "<image>"
    # Without the model, the usual candidate names still place every parameter.
    blind = family_for(model_type, processor=processor)
    assert all(module_part(blind, name) == module_part(family, name) for name, _ in named_parameters(model))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_lora_targets_only_the_language_models_linear_layers(model_type, assets):
    processor, _ = assets(model_type)
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_config(tiny_vl_config(model_type, len(processor.tokenizer)))
    family = family_for(model_type, model=model, processor=processor)
    wanted = {
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
        and module_part(family, name) == "language"
        and name.rsplit(".", 1)[-1] in LANGUAGE_MODEL_LORA_TARGETS
    }
    peft_model = apply_lora(model, rank=2, target_modules=lora_targets(family))
    adapted = {
        name.removeprefix("base_model.model.")
        for name, module in peft_model.named_modules()
        if hasattr(module, "lora_A") and len(module.lora_A)
    }
    assert adapted == wanted and len(wanted) == 2 * 7  # two layers, seven projections each
    trainable = {name for name, param in named_parameters(peft_model) if param.requires_grad}
    assert trainable and all(module_part(family, name) == "language" for name in trainable)
    # One training step's backward reaches every adapter (the model is in train mode, as in a run).
    encoded = _encode(processor, _messages(_image((90, 160, 20))))
    inputs = {key: encoded[key] for key in ("input_ids", "attention_mask", *family.model_input_keys)}
    peft_model.train()
    peft_model(**inputs, labels=encoded["input_ids"]).loss.backward()
    grads = {name: param.grad for name, param in named_parameters(peft_model) if param.requires_grad}
    assert all(grad is not None and grad.abs().sum() > 0 for name, grad in grads.items() if "lora_B" in name)


@pytest.mark.parametrize("model_type", QWEN_TYPES)
def test_packed_documents_with_per_document_positions_match_separate_forwards(model_type, assets):
    processor, model = assets(model_type)
    family = FAMILIES[model_type]
    assert family.packing
    documents = [
        _encode(processor, _messages(_image(color), answer))
        for color, answer in (((200, 0, 0), "ab"), ((0, 0, 200), "xyz1"))
    ]
    separate, positions = [], []
    for document in documents:
        inputs = {key: document[key] for key in ("input_ids", "attention_mask", *family.model_input_keys)}
        with torch.no_grad():
            separate.append(model(**inputs).logits[0])
            own = position_ids_for_packing(
                model, document["input_ids"][0], document["mm_token_type_ids"][0], document["image_grid_thw"]
            )
            # The helper's rows 1-3 are the positions the model computes for itself.
            explicit = model(**inputs, position_ids=own[1:]).logits[0]
        torch.testing.assert_close(explicit, separate[-1], atol=1e-5, rtol=0)
        positions.append(own)
    packed = {
        "input_ids": torch.cat([d["input_ids"] for d in documents], dim=1),
        "mm_token_type_ids": torch.cat([d["mm_token_type_ids"] for d in documents], dim=1),
        "pixel_values": torch.cat([d["pixel_values"] for d in documents]),
        "image_grid_thw": torch.cat([d["image_grid_thw"] for d in documents]),
        "position_ids": torch.cat(positions, dim=-1),
    }
    assert packed["position_ids"].shape == (4, 1, packed["input_ids"].shape[1])
    with torch.no_grad():
        logits = model(**packed, attention_mask=None, use_cache=False).logits[0]
    torch.testing.assert_close(logits, torch.cat(separate), atol=1e-5, rtol=0)


def test_packing_positions_are_refused_for_a_family_without_rope_index(assets):
    _, model = assets("llava")
    with pytest.raises(ConfigError, match="data.packing"):
        position_ids_for_packing(model, torch.tensor([1, 2, 3]), torch.zeros(3, dtype=torch.long))


def test_pixel_limits_reach_the_processor_and_its_saved_folder(assets, tmp_path):
    from transformers import AutoProcessor

    processor, _ = assets("qwen2_vl")
    image = _image((5, 5, 5), size=(200, 200))
    before = _encode(processor, _messages(image))["image_grid_thw"].prod() // 4
    set_pixel_limits(processor, FAMILIES["qwen2_vl"], None, 28 * 28 * 4)
    processor.save_pretrained(str(tmp_path))
    after = _encode(AutoProcessor.from_pretrained(str(tmp_path)), _messages(image))["image_grid_thw"].prod() // 4
    assert before == 16 and after == 4
    set_pixel_limits(processor, FAMILIES["qwen2_vl"], None, 28 * 28 * 16)  # the module's processor, as it was

    molmo, _ = assets("molmo2")
    set_pixel_limits(molmo, FAMILIES["molmo2"], None, 84 * 84)
    assert molmo.image_processor.max_crops == 1
    set_pixel_limits(molmo, FAMILIES["molmo2"], None, 2 * 84 * 84)


def test_tiny_processor_is_built_once_and_copied(tmp_path, cache_dir):
    first = build_tiny_processor("qwen2_vl", str(tmp_path / "a"), cache_dir=cache_dir)
    second = build_tiny_processor("qwen2_vl", str(tmp_path / "b"), cache_dir=cache_dir)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir()) and "tokenizer.json" in files
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert first != second


def test_tiny_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="model_type.*expected one of"):
        tiny_vl_config("paligemma")
    with pytest.raises(ConfigError, match="vocab_size"):
        tiny_vl_config("qwen2_vl", 4)
    config = tiny_vl_config("qwen2_vl", 300, text_config={"num_hidden_layers": 3})
    assert config.text_config.num_hidden_layers == 3 and config.text_config.hidden_size == 64
