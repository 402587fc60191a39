"""``model.quantize`` beyond SFT: DPO with each reference (``adapters_off``: the quantized base itself; ``copy``
shares the quantized weights), GRPO with a KL term against the adapters-off base, VL-SFT with its language model
quantized and the vision tower as configured, and an int8 base. Each trains, keeps its base quantized and exports
a de-quantized ``hf/``."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("torchao")

from honing.config import validate  # noqa: E402
from honing.models.quantize import is_quantized  # noqa: E402
from honing.recipes.dpo import DPORecipe  # noqa: E402
from honing.recipes.grpo import GRPORecipe  # noqa: E402
from tests.recipes.test_dpo import dpo_config  # noqa: E402
from tests.recipes.test_grpo import grpo_raw  # noqa: E402
from tests.recipes.test_vl_sft import transcriptions, vl_config  # noqa: E402, F401  (a fixture)

pytestmark = pytest.mark.slow


def quantized_names(model):
    return [name for name, param in model.named_parameters() if is_quantized(param)]


def check_export(folder):
    weights = load_file(str(folder / "hf" / "model.safetensors"))
    assert weights and all(t.dtype == torch.float32 for t in weights.values())
    assert not any("lora" in name or "base_layer" in name for name in weights)
    assert (folder / "adapter" / "adapter_config.json").exists()


@pytest.mark.parametrize("reference", ["adapters_off", "copy", "precompute", "lazy"])
def test_dpo_on_a_quantized_base(tmp_path, reference):
    raw = dpo_config(tmp_path).model_dump(exclude_unset=True)
    raw["model"]["quantize"] = "nf4"
    raw["dpo"] = {"reference": reference}
    recipe = DPORecipe(validate(raw))
    trainer = recipe.run()
    assert len(quantized_names(recipe.model)) == 7
    if reference == "copy":  # the frozen copy shares the quantized weights rather than holding its own
        shared = {id(p) for p in recipe.model.parameters() if is_quantized(p)}
        assert shared == {id(p) for p in recipe.reference_model.parameters() if is_quantized(p)}
    else:
        assert recipe.reference_model is None  # adapters_off (and lazy under LoRA): the quantized base itself
    assert trainer.global_step == 2 and math.isfinite(recipe.trainer.get_metric("train/loss") or 0.0)
    check_export(tmp_path / "run")


def test_grpo_with_kl_against_the_quantized_base(tmp_path):
    raw = grpo_raw(tmp_path, beta=0.1)
    raw["model"]["lora"] = {"rank": 4, "alpha": 8}
    raw["model"]["quantize"] = "nf4"
    recipe = GRPORecipe(validate(raw))
    recipe.run()
    assert recipe.reference_model is None and len(quantized_names(recipe.model)) == 7
    check_export(tmp_path / "run")


def test_vl_sft_quantizes_the_language_model_only(tmp_path, transcriptions):  # noqa: F811  (the fixture)
    pytest.importorskip("torchvision")
    from honing.recipes.vl_sft import VLSFTRecipe

    config = vl_config(tmp_path, transcriptions, model={"lora": {"rank": 4, "alpha": 8}, "quantize": "nf4"})
    recipe = VLSFTRecipe(config)
    recipe.run()
    names = quantized_names(recipe.model)
    assert names and all("language_model" in name for name in names)
    assert not any(is_quantized(p) for name, p in recipe.model.named_parameters() if "visual" in name)
    check_export(tmp_path / "run")


def test_int8_base_trains_exports_merged_and_is_refused_under_fsdp2(tmp_path):
    from transformers import AutoModelForCausalLM

    from honing.errors import ConfigError
    from honing.export.hf_folder import merged_model
    from honing.models.quantize import quantize_model
    from honing.recipes.sft import SFTRecipe
    from tests.recipes.test_sft import sft_config

    config = sft_config(tmp_path, model={"lora": {"rank": 4, "alpha": 8}, "quantize": "int8"})
    recipe = SFTRecipe(config)
    recipe.run()
    assert {type(p).__name__ for p in recipe.model.parameters() if is_quantized(p)} == {"Int8Tensor"}
    check_export(tmp_path / "run")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "hf")
    with torch.no_grad():
        torch.testing.assert_close(
            exported(input_ids=ids).logits, merged_model(recipe.model)(input_ids=ids).logits, atol=1e-5, rtol=0
        )
    with pytest.raises(ConfigError, match="model.quantize: 'int8' weights cannot be sharded by FSDP2"):
        quantize_model(exported, "int8", device=torch.device("cpu"), shards=2)
