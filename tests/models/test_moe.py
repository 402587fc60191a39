import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from honing.errors import ConfigError
from honing.methods.lm import LMTrainModule
from honing.models import moe
from honing.optim.param_groups import build_adamw

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)


def tiny_config(model_type: str, **overrides):
    experts = {"num_local_experts": 4} if model_type == "mixtral" else {"num_experts": 4}
    values = {**TINY, **experts, "num_experts_per_tok": 2, "vocab_size": 64, **overrides}
    return AutoConfig.for_model(model_type, **values)


@pytest.mark.parametrize(("model_type", "coef"), [("qwen3_moe", 0.001), ("olmoe", 0.01), ("mixtral", 0.001)])
def test_moe_families_and_their_own_coefficient(model_type, coef):
    config = tiny_config(model_type)
    assert moe.is_moe(config) and moe.expert_count(config) == 4
    assert moe.router_aux_loss_coef(config) == coef  # transformers' default for the family
    assert moe.router_aux_loss_coef(config, 0.25) == 0.25  # model.router_aux_loss_coef overrides it
    assert moe.router_aux_loss_coef(tiny_config(model_type, router_aux_loss_coef=0.5)) == 0.5


def test_a_dense_model_is_not_moe_and_refuses_the_coefficient():
    llama = AutoConfig.for_model("llama", **TINY)
    assert not moe.is_moe(llama) and moe.router_aux_loss_coef(llama) is None
    with pytest.raises(ConfigError) as info:
        moe.router_aux_loss_coef(llama, 0.01)
    message = str(info.value)
    assert message.startswith("model.router_aux_loss_coef: 0.01 was given, but the 'llama' model is not") and (
        "\n" not in message
    )
    # a qwen3_moe config with no experts builds dense layers only
    assert not moe.is_moe(AutoConfig.for_model("qwen3_moe", **TINY, num_experts=0))


def test_expert_loads_and_imbalance_match_a_hand_count():
    layer0 = torch.tensor([[3.0, 2, 1, 0], [0, 3, 2, 1], [3, 0, 2, 1], [1, 0, 0, 3]])  # top-2: 01, 12, 02, 30
    layer1 = torch.tensor([[5.0, 4, 0, 0]] * 4)  # every token to experts 0 and 1
    mask = torch.tensor([[1, 1], [1, 0]])  # the last token is padding
    loads = moe.expert_loads((layer0, layer1), top_k=2, token_mask=mask)
    assert loads.tolist() == [[2, 2, 2, 0], [3, 3, 0, 0]]
    # max / mean: 2 / 1.5, and 3 / 1.5 = experts / top_k (every token to the same two)
    assert moe.load_imbalance(loads).tolist() == pytest.approx([4 / 3, 2.0], abs=1e-12)
    unmasked = moe.expert_loads((layer0, layer1), top_k=2)
    assert unmasked.tolist() == [[3, 2, 2, 1], [4, 4, 0, 0]]
    assert moe.load_imbalance(unmasked).tolist() == pytest.approx([1.5, 2.0], abs=1e-12)
    assert moe.load_imbalance(torch.zeros(1, 4, dtype=torch.long)).tolist() == [0.0]  # no tokens, no NaN


def test_router_layers_skip_dense_layers():
    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", num_hidden_layers=3, mlp_only_layers=[1], moe_intermediate_size=16)
    model = AutoModelForCausalLM.from_config(config)
    assert moe.router_layers(model) == [0, 2]
    out = model(input_ids=torch.randint(0, 64, (1, 8)), output_router_logits=True)
    assert len(out.router_logits) == 2  # one per router, in the same order


def test_routed_tokens_are_the_attention_masks_ones():
    ids = torch.zeros(2, 5, dtype=torch.long)
    assert moe.routed_tokens({"input_ids": ids}).item() == 10
    assert moe.routed_tokens({"input_ids": ids, "attention_mask": torch.tensor([[1] * 5, [1, 1, 0, 0, 0]])}) == 7


@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral"])
def test_flops_count_the_active_experts_only(model_type):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(model_type))
    module = LMTrainModule(
        model, build_adamw(model, lr=1e-3, weight_decay=0, betas=(0.9, 0.9), eps=1e-8), micro_batch_size=1
    )
    experts = sum(p.numel() for name, p in model.named_parameters() if ".mlp.experts." in name)
    assert experts > 0 and moe.inactive_expert_params(model) == experts // 2  # top-2 of 4 experts
    dense = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel() - experts
    assert module.num_flops_per_token(16) == 6 * (dense + experts // 2) + 12 * 2 * 32 * 16
