"""``model.quantize: nf4`` beyond SFT: DPO with ``reference: adapters_off`` (the reference is the quantized base
itself), GRPO with a KL term against the adapters-off base, and VL-SFT with its language model quantized and the
vision tower as configured. Each trains, keeps its base quantized and exports a de-quantized ``hf/``."""

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


def test_dpo_adapters_off_reference_shares_the_quantized_base(tmp_path):
    raw = dpo_config(tmp_path).model_dump(exclude_unset=True)
    raw["model"]["quantize"] = "nf4"
    raw["dpo"] = {"reference": "adapters_off"}
    recipe = DPORecipe(validate(raw))
    trainer = recipe.run()
    assert recipe.reference_model is None and len(quantized_names(recipe.model)) == 7
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
