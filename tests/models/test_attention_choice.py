"""``model.attn_implementation: auto``: the decision, with the device and the installed kernels mocked (the kernels
themselves need a GPU), and what a recipe does with it."""

import pytest
import torch

from honing.config import ConfigError
from honing.data.collate import VarlenCollator, stack_collate
from honing.models.attention_choice import AttentionChoice, choose_attention
from honing.recipes.sft import SFTRecipe
from tests.recipes.test_sft import sft_config


def choose(requested="auto", *, device="cuda", packed=True, precision="bf16-mixed", flash="flash_attention_2", **kw):
    return choose_attention(
        requested,
        device_type=device,
        packed_rows=packed,
        precision=precision,
        supports_flash=kw.get("supports_flash", True),
        supports_flex=kw.get("supports_flex", True),
        flash_available=lambda: flash,
    )


def test_packed_rows_on_cuda_take_flash_attention_when_installed_and_in_bf16():
    assert choose().name == "flash_attention_2"
    assert choose(precision="bf16").name == "flash_attention_2"
    assert choose(flash="flash_attention_3").name == "flash_attention_3"  # Hopper's, when its package is there


def test_packed_rows_on_cuda_fall_back_to_flex_attention_and_say_why():
    no_package = choose(flash=None)
    assert no_package.name == "flex_attention" and "flash-attn not installed" in no_package.reason
    fp32 = choose(precision="fp32")
    assert fp32.name == "flex_attention" and "needs bf16" in fp32.reason
    no_path = choose(supports_flash=False)
    assert no_path.name == "flex_attention" and "no flash-attention path" in no_path.reason


def test_sdpa_stays_off_cuda_without_packed_rows_or_without_a_varlen_path():
    assert choose(device="cpu").name == "sdpa"
    assert choose(device="mps").name == "sdpa"
    assert choose(packed=False).name == "sdpa"
    assert choose(supports_flash=False, supports_flex=False).name == "sdpa"


@pytest.mark.parametrize("requested", ["sdpa", "eager", "flash_attention_2", "flex_attention"])
def test_a_named_implementation_is_used_as_given(requested):
    assert choose(requested, device="cpu") == AttentionChoice(requested)
    assert choose(requested, packed=False) == AttentionChoice(requested)


def test_the_recipe_reports_its_choice_and_lays_rows_end_to_end_under_flash(tmp_path):
    recipe = SFTRecipe(sft_config(tmp_path))
    assets = recipe.model_assets()
    model = recipe.build_model(assets)
    assert recipe.config.model.attn_implementation == "auto"
    assert recipe.models.attention == AttentionChoice("sdpa", "auto: not on CUDA")
    assert model.config._attn_implementation == "sdpa"
    assert "attention sdpa (auto: not on CUDA)" == f"attention {recipe.models.describe_attention()}"
    assert recipe.build_data(assets).collator is stack_collate
    # what build_model keeps for a CUDA run with flash attention installed (the kernel itself needs the GPU)
    recipe.models.attention = AttentionChoice("flash_attention_2", "auto: packed rows on CUDA, varlen flash attention")
    assert isinstance(recipe.build_data(assets).collator, VarlenCollator)


def test_the_recipe_switches_the_built_model_to_the_chosen_kernel(tmp_path):
    recipe = SFTRecipe(sft_config(tmp_path))
    model = recipe.build_model(recipe.model_assets())  # on this CPU: built with sdpa, auto keeps it
    # the same model as a CUDA run in fp32 would decide for it (the decision reads only the device's type)
    recipe.models.device, recipe.models.precision = torch.device("cuda"), "fp32"
    model = recipe.models.set_attention(model)
    assert recipe.models.attention.name == "flex_attention" and model.config._attn_implementation == "flex_attention"
    assert "document block mask" in recipe.models.describe_attention()


def test_an_unknown_kernel_is_refused_naming_the_key(tmp_path):
    recipe = SFTRecipe(sft_config(tmp_path, model={"attn_implementation": "flsh"}))
    with pytest.raises(ConfigError, match=r"^model.attn_implementation: .*flsh"):
        recipe.build()


@pytest.mark.parametrize("method", ["dpo", "grpo"])
def test_padded_pairs_and_prompts_keep_sdpa_under_auto_on_cuda(tmp_path, method):
    # DPO's pairs and GRPO's prompts are padded rows, never packed ones: auto picks no varlen kernel for them (a
    # flash kernel would be refused by DPO's shared-prompt mask); data.packing, which they do not read, decides nothing
    from honing.config import validate
    from honing.recipes import recipe_class
    from tests.recipes.test_dpo import dpo_config
    from tests.recipes.test_grpo import grpo_raw

    config = dpo_config(tmp_path) if method == "dpo" else validate(grpo_raw(tmp_path))
    recipe = recipe_class(method)(config)
    model = recipe.build_model(recipe.model_assets())
    recipe.models.device, recipe.models.precision = torch.device("cuda"), "bf16-mixed"
    recipe.models.set_attention(model)
    assert recipe.models.attention.name == "sdpa"
