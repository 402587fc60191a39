import pytest

from honing.config.schema import ParamGroupSection
from honing.errors import ConfigError
from honing.models.freeze import freeze_layers
from honing.models.lora import apply_lora
from honing.optim.param_groups import build_adamw, build_param_groups
from tests.helpers import tiny_llama


def test_no_decay_for_norms_biases_embeddings():
    model = tiny_llama()
    groups = {g["name"]: g for g in build_param_groups(model, weight_decay=0.1)}
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {names[id(p)] for p in groups["no_decay"]["params"]}
    decay = {names[id(p)] for p in groups["decay"]["params"]}
    assert "model.embed_tokens.weight" in no_decay
    assert "model.norm.weight" in no_decay
    assert "model.layers.0.self_attn.q_proj.weight" in decay
    assert groups["decay"]["weight_decay"] == 0.1 and groups["no_decay"]["weight_decay"] == 0.0
    assert len(decay) + len(no_decay) == len(list(model.parameters()))


def test_adamw_remembers_initial_lr():
    optimizer = build_adamw(tiny_llama(), lr=0.01, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    assert all(group["initial_lr"] == 0.01 for group in optimizer.param_groups)


def names_in(model, group):
    names = {id(p): n for n, p in model.named_parameters()}
    return sorted(names[id(p)] for p in group["params"])


def test_user_groups_take_matching_parameters_with_their_own_lr():
    model = tiny_llama()
    groups = [
        {"params": "model.embed_tokens.*", "lr": 0.001, "weight_decay": None},
        {"params": ["*.mlp.*", "model.layers.0.*"], "lr": None, "weight_decay": 0.5},
    ]
    optimizer = build_adamw(model, lr=0.01, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, groups=groups)
    by_name = {g["name"]: g for g in optimizer.param_groups}
    # group 0 is split by the default decay rule; the embedding is not decayed, so its decayed half is empty
    assert list(by_name) == ["param_groups.0.no_decay", "param_groups.1", "decay", "no_decay"]
    assert names_in(model, by_name["param_groups.0.no_decay"]) == ["model.embed_tokens.weight"]
    mlp_or_layer0 = [
        f"model.layers.{i}.mlp.{proj}.weight" for i in (0, 1) for proj in ("down_proj", "gate_proj", "up_proj")
    ]
    mlp_or_layer0 += [f"model.layers.0.self_attn.{proj}.weight" for proj in ("k_proj", "o_proj", "q_proj", "v_proj")]
    mlp_or_layer0 += ["model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"]
    assert names_in(model, by_name["param_groups.1"]) == sorted(mlp_or_layer0)
    assert names_in(model, by_name["decay"]) == sorted(
        [f"model.layers.1.self_attn.{proj}.weight" for proj in ("k_proj", "o_proj", "q_proj", "v_proj")]
        + ["lm_head.weight"]
    )
    assert names_in(model, by_name["no_decay"]) == [
        "model.layers.1.input_layernorm.weight",
        "model.layers.1.post_attention_layernorm.weight",
        "model.norm.weight",
    ]
    lrs = {name: (g["lr"], g["initial_lr"], g["weight_decay"]) for name, g in by_name.items()}
    assert lrs == {
        "param_groups.0.no_decay": (0.001, 0.001, 0.0),
        "param_groups.1": (0.01, 0.01, 0.5),
        "decay": (0.01, 0.01, 0.1),
        "no_decay": (0.01, 0.01, 0.0),
    }
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters())) == 21


def test_user_group_split_by_decay_and_frozen_parameters_left_out():
    model = tiny_llama()
    freeze_layers(model, ["model.layers.1.*"])
    groups = build_param_groups(model, weight_decay=0.1, groups=[{"params": "model.layers.*", "lr": 0.5}])
    by_name = {g["name"]: g for g in groups}
    assert names_in(model, by_name["param_groups.0"]) == sorted(
        f"model.layers.0.{part}.weight"
        for part in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
    )
    assert names_in(model, by_name["param_groups.0.no_decay"]) == [
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
    ]
    assert by_name["param_groups.0"]["lr"] == 0.5 and by_name["param_groups.0"]["weight_decay"] == 0.1
    assert by_name["param_groups.0.no_decay"]["lr"] == 0.5 and by_name["param_groups.0.no_decay"]["weight_decay"] == 0
    grouped = {id(p) for g in groups for p in g["params"]}
    assert len(grouped) == 21 - 9  # layer 1's nine tensors are frozen and in no group
    assert not any(id(p) in grouped for n, p in model.named_parameters() if n.startswith("model.layers.1."))


def test_lora_parameters_get_their_own_group_by_transformers_names():
    model = apply_lora(tiny_llama(), rank=2, target_modules=["q_proj", "v_proj"])
    optimizer = build_adamw(
        model,
        lr=0.01,
        weight_decay=0.0,
        betas=(0.9, 0.95),
        eps=1e-8,
        groups=[ParamGroupSection(params=["model.layers.0.*lora_B*"], lr=0.1)],
    )
    by_name = {g["name"]: g for g in optimizer.param_groups}
    assert list(by_name) == ["param_groups.0", "decay"]
    assert names_in(model, by_name["param_groups.0"]) == [
        f"base_model.model.model.layers.0.self_attn.{proj}.lora_B.default.weight" for proj in ("q_proj", "v_proj")
    ]
    assert len(by_name["decay"]["params"]) == 8 - 2
    assert by_name["param_groups.0"]["initial_lr"] == 0.1 and by_name["decay"]["initial_lr"] == 0.01


def test_group_matching_no_trainable_parameter_is_a_config_error():
    model = tiny_llama()
    freeze_layers(model, ["model.norm.*"])
    expected = (
        r"^optim\.param_groups\[1\]\.params: \['model\.norm\.\*'\] matches no trainable parameter; "
        r"trainable parameter names look like model\.embed_tokens\.weight, "
    )
    with pytest.raises(ConfigError, match=expected):
        build_param_groups(model, weight_decay=0.1, groups=[{"params": "lm_head.*"}, {"params": "model.norm.*"}])
    with pytest.raises(
        ConfigError,
        match=r"^optim\.param_groups\[1\]\.params: \['lm_head\.weight'\] matches only "
        r"parameters that an earlier group already took$",
    ):
        build_param_groups(model, weight_decay=0.1, groups=[{"params": "lm_*"}, {"params": "lm_head.weight"}])
