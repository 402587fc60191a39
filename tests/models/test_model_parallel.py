"""Layout checks against the model, made before any process trains: heads, KV heads, experts, plans, LoRA."""

import pytest
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3MoeConfig

from honing.errors import ConfigError
from honing.models.model_parallel import check_model_layout, expert_count, plans
from honing.parallel_dims import ParallelDims


def llama(heads=4, kv_heads=2):
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=8 * heads,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=64,
    )
    return AutoModelForCausalLM.from_config(config)


def moe(experts=4):
    config = Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        moe_intermediate_size=32,
        num_experts=experts,
        num_experts_per_tok=2,
    )
    return AutoModelForCausalLM.from_config(config)


def test_the_family_plan_covers_attention_mlp_embeddings_and_head():
    tp_plan, ep_plan = plans(llama(), ParallelDims(tp=2, world_size=2))
    assert tp_plan["model.layers.1.self_attn.q_proj.weight"] == "colwise"
    assert tp_plan["model.layers.0.mlp.down_proj"] == "rowwise"
    assert tp_plan["model.embed_tokens"] == "embedding_rowwise"
    assert not ep_plan


def test_the_expert_plan_of_a_moe_family():
    _, ep_plan = plans(moe(), ParallelDims(ep=2, world_size=2))
    assert ep_plan["model.layers.0.mlp.experts"] == "ep_dispatch_experts"
    assert expert_count(moe().config) == 4 and expert_count(llama().config) is None


@pytest.mark.parametrize(
    "model, dims, lora, message",
    [
        (
            lambda: llama(heads=4, kv_heads=1),
            dict(tp=2),
            False,
            r"parallel.tp=2 must divide the model's num_key_value_heads \(1\)",
        ),
        (
            lambda: llama(heads=6, kv_heads=6),
            dict(tp=4),
            False,
            r"parallel.tp=4 must divide the model's num_attention_heads \(6\)",
        ),
        (llama, dict(tp=2), True, r"parallel.tp=2 with model.lora"),
        (llama, dict(ep=2), False, r"parallel.ep=2: the 'llama' model has no experts"),
        (lambda: moe(experts=6), dict(ep=4), False, r"parallel.ep=4 must divide the number of experts \(6\)"),
        (moe, dict(ep=2, tp=2), False, r"expert parallelism composes with data parallelism"),
        (moe, dict(cp=2), False, r"parallel.cp=2 with the MoE model 'qwen3_moe'"),
        (lambda: llama(heads=2, kv_heads=2), dict(cp=4), False, r"parallel.cp=4 must divide the model's attention"),
    ],
)
def test_layouts_the_model_cannot_take_are_refused(model, dims, lora, message):
    world = 1
    for value in dims.values():
        world *= value
    with pytest.raises(ConfigError, match=message):
        check_model_layout(model(), ParallelDims(**dims, world_size=world), lora=lora)


def test_a_layout_the_model_takes_passes():
    check_model_layout(llama(), ParallelDims(tp=2, world_size=4))
    check_model_layout(moe(), ParallelDims(ep=2, world_size=4))
