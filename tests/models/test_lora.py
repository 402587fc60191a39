"""apply_lora, freeze_layers and is_lora on a tiny Llama (hidden 32, intermediate 64, 2 layers, vocab 64)."""

import re

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from honing.errors import ConfigError
from honing.models import count_parameters
from honing.models.freeze import freeze_layers
from honing.models.lora import apply_lora
from honing.models.wrappers import is_lora
from tests.helpers import tiny_llama

# Parameters of tiny_llama(): embeddings 64*32 and lm_head 32*64 (untied), per layer q/k/v/o 4*32*32,
# gate/up/down 3*32*64, two norms 2*32; the final norm 32.
EMBED = 64 * 32
LAYER = 4 * 32 * 32 + 3 * 32 * 64 + 2 * 32
BASE = EMBED + EMBED + 2 * LAYER + 32
# LoRA adds rank * (in + out) per adapted Linear: q/k/v/o are 32 -> 32, gate/up 32 -> 64, down 64 -> 32.
LORA_PER_LAYER_PER_RANK = 4 * (32 + 32) + 3 * (32 + 64)


def trainable_names(model):
    return [name for name, param in model.named_parameters() if param.requires_grad]


def test_all_linear_lora_trains_only_adapters():
    model = apply_lora(tiny_llama(), rank=4, alpha=8)
    assert is_lora(model)
    assert count_parameters(model, trainable_only=True) == 2 * 4 * LORA_PER_LAYER_PER_RANK == 4352
    assert count_parameters(model) == BASE + 4352 == 29088
    names = trainable_names(model)
    assert len(names) == 2 * 7 * 2  # an A and a B matrix per adapted Linear; lm_head is not adapted
    assert all(re.search(r"\.lora_[AB]\.default\.weight$", name) for name in names)
    scaling = model.base_model.model.model.layers[0].self_attn.q_proj.scaling["default"]
    assert scaling == 8 / 4


def test_listed_target_modules_and_modules_to_save():
    model = apply_lora(tiny_llama(), rank=2, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])
    # q and v in two layers: 2 * 2 * 2 * (32 + 32), plus a trainable copy of lm_head (64 * 32)
    assert count_parameters(model, trainable_only=True) == 512 + 2048
    names = trainable_names(model)
    assert "base_model.model.lm_head.modules_to_save.default.weight" in names
    assert not any("k_proj" in name or "mlp" in name for name in names)
    regex = apply_lora(tiny_llama(), rank=2, target_modules=r".*\.(q_proj|v_proj)")  # a string is a regex
    assert count_parameters(regex, trainable_only=True) == 512


def test_missing_targets_skip_adapts_the_names_that_match_as_peft_does(caplog):
    # a Llama config's targets on a model that lacks some of them: peft (and so Oumi, TRL, axolotl) adapts the rest
    targets = ["q_proj", "qkv_proj", "v_proj", "gate_up_proj"]
    with caplog.at_level("INFO", logger="honing.models.lora"):
        model = apply_lora(tiny_llama(), rank=2, target_modules=targets, missing_targets="skip")
    assert count_parameters(model, trainable_only=True) == 512  # q and v only, as with ["q_proj", "v_proj"]
    from peft import LoraConfig, get_peft_model

    reference = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=targets))  # peft's own rule
    assert count_parameters(reference, trainable_only=True) == 512
    assert [record.getMessage() for record in caplog.records] == [
        "model.lora.target_modules: qkv_proj, gate_up_proj match no module of this model, skipped "
        "(model.lora.missing_targets: skip); adapters on q_proj, v_proj"
    ]
    with pytest.raises(ConfigError, match="'qkv_proj', 'gate_up_proj' matches no module"):  # none matches: as peft
        apply_lora(tiny_llama(), target_modules=["qkv_proj", "gate_up_proj"], missing_targets="skip")


def test_plain_model_is_not_lora():
    assert not is_lora(tiny_llama())
    assert not is_lora(torch.nn.Linear(2, 2))


def test_target_module_that_matches_nothing_is_a_config_error():
    expected = (
        "model.lora.target_modules: ['q_proj', 'qproj']: 'qproj' matches no module; linear modules are "
        "named q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        apply_lora(tiny_llama(), target_modules=["q_proj", "qproj"])
    expected = (
        "model.lora.target_modules: 'q_proj' matches no module (a string is a regular expression over "
        "whole module names such as 'model.layers.0.self_attn.q_proj'; a list matches name endings)"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        apply_lora(tiny_llama(), target_modules="q_proj")  # a string is a regex over the full module name
    with pytest.raises(
        ConfigError,
        match=r"^model\.lora\.target_modules: '\(q_proj' is not a valid regular "
        r"expression \(missing \), unterminated subpattern at position 0\)",
    ):
        apply_lora(tiny_llama(), target_modules="(q_proj")


def test_bad_modules_to_save_and_task_type_are_config_errors():
    with pytest.raises(
        ConfigError,
        match=r"^model\.lora\.modules_to_save\[0\]: 'head' matches no module; "
        r"module names end in model, embed_tokens, layers, self_attn",
    ):
        apply_lora(tiny_llama(), modules_to_save=["head"])
    with pytest.raises(
        ConfigError,
        match=r"^model\.lora\.task_type: 'CAUSAL' is not a peft task type; "
        r"expected one of .*CAUSAL_LM",
    ):
        apply_lora(tiny_llama(), task_type="CAUSAL")


def test_a_container_module_peft_cannot_adapt_is_a_config_error():
    expected = (
        "model.lora.target_modules: ['mlp']: peft refused it: Target module LlamaMLP is not supported. "
        "Currently, only the following modules are supported: `torch.nn.Linear`, "
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}[^\n]+$"):
        apply_lora(tiny_llama(), target_modules=["mlp"])


def test_freeze_layers_freezes_exactly_the_matching_parameters():
    model = tiny_llama()
    assert freeze_layers(model, ["model.embed_tokens.*", "model.layers.0.*"]) == EMBED + LAYER == 12352
    assert count_parameters(model, trainable_only=True) == BASE - 12352
    frozen = {name for name, param in model.named_parameters() if not param.requires_grad}
    assert frozen == {"model.embed_tokens.weight"} | {
        name for name, _ in model.named_parameters() if name.startswith("model.layers.0.")
    }
    assert len(frozen) == 1 + 9


def test_freeze_layers_on_a_lora_model_uses_the_transformers_names():
    model = apply_lora(tiny_llama(), rank=4)
    # the base weights of layer 0 were frozen already: only its adapters are newly frozen
    assert freeze_layers(model, ["model.layers.0.*"]) == 4 * LORA_PER_LAYER_PER_RANK == 2176
    assert count_parameters(model, trainable_only=True) == 4 * LORA_PER_LAYER_PER_RANK  # layer 1's adapters
    assert all(".layers.1." in name for name in trainable_names(model))


def test_freeze_pattern_that_matches_nothing_is_a_config_error():
    model = tiny_llama()
    with pytest.raises(
        ConfigError,
        match=r"^model\.freeze_layers\[1\]: 'layer\.0\.\*' matches no module or parameter of this model; "
        r"its modules are model\.embed_tokens, model\.layers, ",
    ):
        freeze_layers(model, ["model.norm.*", "layer.0.*"])
    assert count_parameters(model, trainable_only=True) == BASE  # nothing frozen on error


def tiny_moe():
    """A two-layer qwen3_moe whose experts are one ``gate_up_proj`` / ``down_proj`` tensor each, not Linears."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "qwen3_moe", vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    return AutoModelForCausalLM.from_config(config)


def test_target_parameters_adapt_an_moes_expert_tensor_and_it_trains():
    # gpt-oss's Oumi recipe: LoRA on the experts of chosen layers, named by the parameter's last dotted parts
    model = apply_lora(tiny_moe(), rank=4, target_modules=[], target_parameters=["1.mlp.experts.down_proj"])
    assert trainable_names(model) == [
        "base_model.model.model.layers.1.mlp.experts.lora_A.default.weight",
        "base_model.model.model.layers.1.mlp.experts.lora_B.default.weight",
    ]
    base = model.get_parameter("base_model.model.model.layers.1.mlp.experts.base_layer.down_proj").detach().clone()
    adapter = model.get_parameter("base_model.model.model.layers.1.mlp.experts.lora_B.default.weight")
    assert not adapter.any()  # peft starts B at zero
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    input_ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    model(input_ids=input_ids, labels=input_ids).loss.backward()
    optimizer.step()
    assert adapter.any()  # the adapter learned from the experts' gradient
    expert = model.get_parameter("base_model.model.model.layers.1.mlp.experts.base_layer.down_proj")
    assert torch.equal(expert, base)  # the expert tensor itself stays frozen


def test_target_parameters_beside_all_linear_and_a_name_that_matches_nothing():
    model = apply_lora(tiny_moe(), rank=4, target_parameters=["mlp.experts.gate_up_proj"])
    names = trainable_names(model)
    assert sum("experts.lora_" in name for name in names) == 2 * 2  # an A and a B per layer's experts
    assert any("q_proj.lora_A" in name for name in names)  # all-linear still adapts the attention
    with pytest.raises(ConfigError, match=r"model.lora.target_parameters\[0\]: '9.mlp.experts.down_proj' matches no"):
        apply_lora(tiny_moe(), target_modules=[], target_parameters=["9.mlp.experts.down_proj"])
