"""``model.lean_forward``: the lean decoder forward and the batched Qwen-VL vision attention give transformers'
outputs and every gradient bit for bit, take the calls they cover, and hand the rest to transformers."""

from __future__ import annotations

import copy

import pytest
import torch
from PIL import Image
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

import honing.models.lean_training_forward as lean
from honing.data.vision.causal_masks import causal_padding_mask
from honing.models.lean_training_forward import use_lean_forwards
from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config
from tests.models.lora_fixtures import trained_lora_model
from tests.models.test_lean_decoder import ARCHITECTURES, build


def padded_batch(vocab: int, padding: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, vocab, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    if padding == "right":
        mask[1, 6:] = 0
        mask[2, 2:] = 0
    elif padding == "left":
        mask[0, :4] = 0
    return {"input_ids": ids, "attention_mask": mask}


def outputs_and_gradients(
    model: torch.nn.Module, inputs: dict, autocast: bool = False
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The logits of a training forward (under bf16 autocast when asked) and every parameter's gradient of a loss
    over them."""
    model.train()
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(**inputs, use_cache=False).logits
    (logits.float().pow(2).mean() + logits[..., :5].sum()).backward()
    return logits.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_bit_identical(model: torch.nn.Module, inputs: dict, monkeypatch, prepare=None, autocast=False) -> int:
    """The lean copy's logits and gradients equal ``model``'s exactly (``prepare``: applied to each after the
    copy); how many forwards took the lean path."""
    taken: list[bool] = []
    decide = lean.takes_lean_path
    monkeypatch.setattr(lean, "takes_lean_path", lambda *args: taken.append(decide(*args)) or taken[-1])
    lean_model = copy.deepcopy(model)
    for each in (model, lean_model) if prepare else ():
        prepare(each)
    assert use_lean_forwards(lean_model)
    theirs, their_grads = outputs_and_gradients(model, inputs, autocast)
    ours, our_grads = outputs_and_gradients(lean_model, inputs, autocast)
    assert torch.equal(ours, theirs)
    assert our_grads.keys() == their_grads.keys() and len(our_grads) > 0
    for name, grad in their_grads.items():
        assert torch.equal(our_grads[name], grad), name
    return sum(taken)


@pytest.mark.parametrize("padding", ["none", "right", "left"])
@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_llama_shaped_models_train_on_the_same_bits(name, padding, monkeypatch):
    model = build(name)
    assert assert_bit_identical(model, padded_batch(model.config.vocab_size, padding), monkeypatch) == 1


@pytest.mark.parametrize("name", ["llama-gqa", "qwen2", "qwen3"])
def test_bf16_autocast_gives_the_same_bits(name, monkeypatch):  # trainer.precision: bf16-mixed
    model = build(name)
    batch = padded_batch(model.config.vocab_size, "right")
    assert assert_bit_identical(model, batch, monkeypatch, autocast=True) == 1


def test_packed_rows_keep_transformers_document_mask(monkeypatch):
    model = build("llama")
    ids = padded_batch(model.config.vocab_size, "none")["input_ids"]
    packed = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1]] * 3)  # three documents a row: no mask, positions restart
    assert assert_bit_identical(model, {"input_ids": ids, "position_ids": packed}, monkeypatch) == 0
    plain = torch.arange(9)[None].expand(3, -1)
    assert assert_bit_identical(model, {"input_ids": ids, "position_ids": plain}, monkeypatch) == 1


def test_lora_adapters_are_called_as_modules(monkeypatch):
    model = trained_lora_model()
    assert assert_bit_identical(model, padded_batch(model.config.vocab_size, "right"), monkeypatch) == 1


def test_checkpointed_and_hooked_layers_run_as_modules(monkeypatch):
    from honing.models.parallel import apply_activation_checkpointing, find_blocks

    calls: list[int] = []

    def checkpoint_and_hook(model: torch.nn.Module) -> None:
        apply_activation_checkpointing(find_blocks(model), "every_n", every=2)  # layer 1: a forward of its own
        model.model.layers[0].register_forward_pre_hook(lambda module, args: calls.append(0))

    model = build("qwen2")
    batch = padded_batch(model.config.vocab_size, "right")
    assert assert_bit_identical(model, batch, monkeypatch, prepare=checkpoint_and_hook) == 1
    assert len(calls) == 2  # the hooked layer was called, in transformers' forward and in the lean one


def test_uncovered_calls_run_transformers_forward(monkeypatch):
    model = build("llama")
    lean_model = copy.deepcopy(model)
    use_lean_forwards(lean_model)
    ran: list[str] = []
    monkeypatch.setattr(lean, "_layer", lambda *args: ran.append("lean") or args[1])
    batch = padded_batch(model.config.vocab_size, "right")
    with torch.no_grad():
        cached = lean_model(**batch, use_cache=True)  # generation's cache: transformers fills it
        hidden = lean_model(**batch, use_cache=False, output_hidden_states=True)
    assert cached.past_key_values is not None and len(hidden.hidden_states) == 3
    lean_model.config._attn_implementation = "eager"
    with torch.no_grad():
        lean_model(**batch, use_cache=False)
    assert ran == []


def test_a_compiled_whole_model_traces_transformers_forward(monkeypatch):
    model = build("llama")
    use_lean_forwards(model)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    ran: list[str] = []
    monkeypatch.setattr(lean, "_layer", lambda *args: ran.append("lean") or args[1])
    with torch.no_grad():
        model(**padded_batch(model.config.vocab_size, "right"), use_cache=False)
    assert ran == []


def test_models_of_other_shapes_are_left_alone():
    torch.manual_seed(0)
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_layer=1, n_embd=32, n_head=2))
    windowed = build("llama")
    windowed.config.sliding_window = 16
    windowed.config.model_type = "mistral"
    windowed.model.config = windowed.config
    assert use_lean_forwards(gpt2) == []
    assert use_lean_forwards(windowed) == []
    assert "forward" not in windowed.model.__dict__


def vl_batch(model: torch.nn.Module, folder, sizes: list[tuple[int, int]], mask_4d: bool) -> dict:
    """A right-padded batch of one image per row (``sizes``: width, height), from the tiny processor."""
    processor = AutoProcessor.from_pretrained(build_tiny_processor(model.config.model_type, str(folder)))
    texts, images = [], []
    for index, size in enumerate(sizes):
        chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "read" + "!" * index}]}]
        texts.append(processor.apply_chat_template(chat, add_generation_prompt=True))
        images.append(Image.new("RGB", size, (40 * index, 90, 200)))
    processor.tokenizer.padding_side = "right"
    batch = dict(processor(text=texts, images=images, return_tensors="pt", padding=True))
    if mask_4d:  # as honing's VL collator passes it, with the rope positions a 4-D mask needs
        mask = batch["attention_mask"]
        batch["position_ids"], _ = model.model.get_rope_index(
            batch["input_ids"], batch["mm_token_type_ids"], batch["image_grid_thw"], attention_mask=mask
        )
        batch["attention_mask"] = causal_padding_mask(mask)
    return batch


def vl_model(model_type: str) -> torch.nn.Module:
    torch.manual_seed(0)
    from honing.models.tiny_vl import tiny_vocab_size

    config = tiny_vl_config(model_type, vocab_size=tiny_vocab_size(model_type))
    return AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa")


def test_a_vision_language_model_under_bf16_autocast_gives_the_same_bits(tmp_path, monkeypatch):
    model = vl_model("qwen2_vl")
    batch = vl_batch(model, tmp_path, [(140, 28), (56, 56), (140, 28)], True)
    assert assert_bit_identical(model, batch, monkeypatch, autocast=True) == 1


@pytest.mark.parametrize(
    ("model_type", "sizes", "mask_4d"),
    [
        ("qwen2_vl", [(140, 28)] * 3, True),  # images of one size: one sdpa call a block
        ("qwen2_vl", [(140, 28), (56, 56), (140, 28)], False),  # two sizes: grouped
        ("qwen2_5_vl", [(140, 28), (56, 56), (112, 56)], True),
        ("qwen3_vl", [(64, 64), (64, 64)], False),  # the vision attention only: its text model adds deepstack
    ],
)
def test_vision_language_models_train_on_the_same_bits(model_type, sizes, mask_4d, tmp_path, monkeypatch):
    model = vl_model(model_type)
    batch = vl_batch(model, tmp_path, sizes, mask_4d)
    calls: list[int] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k)
    )
    taken = assert_bit_identical(model, batch, monkeypatch)
    assert taken == (0 if model_type == "qwen3_vl" else 1)
    depth = model.config.vision_config.depth
    per_block = len(set(sizes))
    text_layers = model.config.text_config.num_hidden_layers
    theirs, ours = len(sizes) * depth + text_layers, per_block * depth + text_layers
    if model_type != "qwen2_5_vl":  # its windows split images further
        assert len(calls) == theirs + ours


def test_the_key_turns_it_off(tmp_path):
    from honing.config import validate
    from honing.recipes import recipe_for

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 40)

    def decoder(**model):
        raw = {
            "method": "pretrain",
            "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "1steps", "device": "cpu"},
            "data": {"train": {"sources": [{"path": str(corpus)}]}, "seq_len": 32, "global_batch_size": 2},
            "tokenizer": {"kind": "byte"},
            "model": {
                "config": {
                    "model_type": "llama",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                },
                **model,
            },
            "callbacks": {"sample": {"enabled": False}, "evaluator": {"enabled": False}},
        }
        recipe = recipe_for(validate(raw))
        recipe.build()
        return recipe.model.model

    assert "forward" in decoder().__dict__  # on by default
    assert "forward" not in decoder(lean_forward=False).__dict__
