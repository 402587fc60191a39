"""Export to Hugging Face format: merging LoRA gives the adapter model's logits, adapter folders peft loads."""

from __future__ import annotations

import os

import pytest
import torch
from peft import PeftModel
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from honing.export.hf_folder import export_hf, merged_model, merged_state_dict, save_adapter
from honing.models.wrappers import is_lora
from tests.helpers import tiny_llama
from tests.models.lora_fixtures import VOCAB, logits, trained_lora_model

# peft's loader asks transformers about gradient checkpointing through a name transformers 5 deprecates.
pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning"),
]


def test_merged_model_gives_the_adapter_models_logits_and_differs_from_the_base():
    base_logits = logits(tiny_llama(vocab=VOCAB, seed=0).eval())
    model = trained_lora_model()
    adapter_logits = logits(model)
    merged = merged_model(model)
    assert type(merged) is LlamaForCausalLM
    assert not any("lora" in name or "modules_to_save" in name for name in merged.state_dict())
    torch.testing.assert_close(logits(merged), adapter_logits, rtol=0, atol=1e-5)
    assert (adapter_logits - base_logits).abs().max() > 0.1  # the adapter mattered
    # the training model is untouched: still LoRA, same outputs, adapters still trainable
    assert is_lora(model)
    assert torch.equal(logits(model), adapter_logits)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 2 * 4 * (2 * 64 + 96) + VOCAB * 32


def test_a_plain_model_is_its_own_merged_model():
    model = tiny_llama()
    assert merged_model(model) is model


def test_save_adapter_writes_a_peft_folder_that_peft_loads(tmp_path):
    model = trained_lora_model()
    out = str(tmp_path / "adapter")
    os.makedirs(out)
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")  # an earlier save, replaced whole
    (tmp_path / "adapter" / "stale.txt").write_text("from an older save")
    assert save_adapter(model, out) == out
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(out))
    assert "stale.txt" not in os.listdir(out) and sorted(os.listdir(tmp_path)) == ["adapter"]  # no .tmp left
    loaded = PeftModel.from_pretrained(tiny_llama(vocab=VOCAB, seed=0), out).eval()
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="LlamaForCausalLM has no LoRA adapter"):
        save_adapter(tiny_llama(), str(tmp_path / "none"))


def test_export_hf_of_a_lora_model_writes_the_merged_model(tmp_path):
    model = trained_lora_model()
    export_hf(model, None, str(tmp_path / "hf"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=1e-5)
    assert is_lora(model)


def test_merged_state_dict_folds_a_gathered_state_dict_like_peft_does():
    model = trained_lora_model()
    merged = merged_state_dict(model, get_model_state_dict(model))
    reference = merged_model(model).state_dict()
    assert sorted(merged) == sorted(reference)
    for name, tensor in reference.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-6, msg=name)
    assert not torch.equal(
        merged["model.layers.0.self_attn.q_proj.weight"],
        model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight,
    )


def test_an_export_never_replaces_a_folder_that_is_not_an_earlier_export(tmp_path):
    from honing.errors import CheckpointError

    model = trained_lora_model()
    keep = tmp_path / "documents"
    keep.mkdir()
    (keep / "thesis.txt").write_text("years of work")
    with pytest.raises(CheckpointError, match="not an earlier export"):
        export_hf(model, None, str(keep))
    assert (keep / "thesis.txt").read_text() == "years of work"
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        save_adapter(model, str(tmp_path / "file"))
    export_hf(model, None, str(tmp_path / "hf"))
    export_hf(model, None, str(tmp_path / "hf"))  # an earlier export is replaced
    assert (tmp_path / "hf" / "config.json").exists() and not (tmp_path / "hf.old").exists()
