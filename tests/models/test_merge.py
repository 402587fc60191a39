"""Merging LoRA into the base model: same logits as the adapter model, adapter folders, LoRA checkpoints."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile

import pytest
import torch
import yaml
from peft import PeftModel
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from honing.data.tokenizer import build_tokenizer
from honing.errors import CheckpointError
from honing.models.checkpoint_export import export_checkpoint, load_model_from_checkpoint
from honing.models.export import export_hf
from honing.models.lora import apply_lora, is_lora
from honing.models.merge import merge_checkpoint, merged_model, merged_state_dict, save_adapter
from honing.train.checkpoint import Checkpointer
from honing.train.train_module import TrainModule
from tests.helpers import tiny_llama

# peft's loader asks transformers about gradient checkpointing through a name transformers 5 deprecates.
pytestmark = [pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
              pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")]

VOCAB = 258  # the byte tokenizer's size
LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "bias": "none", "target_modules": ["q_proj", "v_proj", "down_proj"],
        "task_type": "CAUSAL_LM", "modules_to_save": ["lm_head"]}


def trained_lora_model(seed: int = 0, lora: dict | None = None) -> torch.nn.Module:
    """A tiny Llama with LoRA whose adapters (and saved modules) hold random non-zero values.

    peft starts B at zero, which would make the adapter a no-op and every comparison trivially true.
    """
    model = apply_lora(tiny_llama(vocab=VOCAB, seed=seed), **(lora or LORA))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model.eval()


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        return model(input_ids=ids).logits


class LoraModule(TrainModule):
    """Just enough TrainModule for the Checkpointer: the model and an AdamW over its trainable parameters."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)


def save_lora_checkpoint(checkpoint_dir: str, model: torch.nn.Module, lora: dict | None, **model_section) -> None:
    """A checkpoint laid out as a LoRA run saves it: DCP state of the peft model, the base model's
    config, the tokenizer and the run config with ``model.lora``."""
    run_config = {"method": "sft", "model": {"lora": lora, **model_section}}
    files: dict[str, str | bytes] = {"config.yaml": yaml.safe_dump(run_config),
                                     "model/config.json": model.config.to_json_string()}
    with tempfile.TemporaryDirectory() as tmp:
        build_tokenizer("byte").save_pretrained(tmp)
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name), "rb") as handle:
                files[f"tokenizer/{name}"] = handle.read()
    Checkpointer().save(checkpoint_dir, LoraModule(model), {"global_step": 3}, extra_files=files)


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
    (tmp_path / "adapter" / "stale.txt").write_text("from an older save")
    assert save_adapter(model, out) == out
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(out))
    assert "stale.txt" not in os.listdir(out) and sorted(os.listdir(tmp_path)) == ["adapter"]  # no .tmp left
    loaded = PeftModel.from_pretrained(tiny_llama(vocab=VOCAB, seed=0), out).eval()
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=1e-6)
    save_adapter(model, str(tmp_path / "gathered"), state_dict=get_model_state_dict(model))  # the FSDP path
    assert load_file(str(tmp_path / "gathered" / "adapter_model.safetensors")).keys() == load_file(
        os.path.join(out, "adapter_model.safetensors")).keys()
    loaded = PeftModel.from_pretrained(tiny_llama(vocab=VOCAB, seed=0), str(tmp_path / "gathered")).eval()
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
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight)


def test_export_hf_of_a_lora_model_with_a_gathered_state_dict_writes_the_merged_model(tmp_path):
    model = trained_lora_model()  # what the FSDP export path passes: the full peft state dict
    export_hf(model, None, str(tmp_path / "hf"), state_dict=get_model_state_dict(model))
    saved = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(saved) == sorted(merged_model(model).state_dict())
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=1e-5)


def test_merge_checkpoint_writes_merged_model_tokenizer_and_adapter(tmp_path):
    model = trained_lora_model()
    checkpoint = str(tmp_path / "run" / "step3")
    save_lora_checkpoint(checkpoint, model, LORA, name_or_path="/models/base-llama")
    expected = logits(model)

    reloaded, _ = load_model_from_checkpoint(checkpoint)
    assert is_lora(reloaded)
    torch.testing.assert_close(logits(reloaded.eval()), expected, rtol=0, atol=0)

    out = str(tmp_path / "merged")
    assert merge_checkpoint(checkpoint, out) == out
    assert sorted(os.listdir(tmp_path)) == ["merged", "run"]  # no staging folders left behind
    files = set(os.listdir(out))
    assert {"adapter", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(os.path.join(out, "adapter")))
    with open(os.path.join(out, "adapter", "adapter_config.json")) as handle:
        adapter_config = json.load(handle)
    assert adapter_config["base_model_name_or_path"] == "/models/base-llama"  # the run's base, for peft users
    assert (adapter_config["r"], adapter_config["lora_alpha"], sorted(adapter_config["target_modules"])) == (
        4, 8, ["down_proj", "q_proj", "v_proj"])

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(logits(merged), expected, rtol=0, atol=1e-5)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.decode(tokenizer("héllo")["input_ids"]) == "héllo"
    adapter = PeftModel.from_pretrained(tiny_llama(vocab=VOCAB, seed=0), os.path.join(out, "adapter")).eval()
    torch.testing.assert_close(logits(adapter), expected, rtol=0, atol=1e-6)

    export_checkpoint(checkpoint, str(tmp_path / "exported"))  # `honing export` merges too
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "exported").eval()
    assert "adapter" not in os.listdir(tmp_path / "exported")
    torch.testing.assert_close(logits(exported), expected, rtol=0, atol=1e-5)


def test_merge_of_a_full_fine_tuning_checkpoint_writes_the_model_and_warns(tmp_path, caplog):
    model = tiny_llama(vocab=VOCAB, seed=3).eval()
    checkpoint = str(tmp_path / "step3")
    save_lora_checkpoint(checkpoint, model, None)
    with caplog.at_level(logging.WARNING, logger="honing"):
        merge_checkpoint(checkpoint, str(tmp_path / "merged"))
    assert f"{checkpoint} has no LoRA adapter (model.lora is not set in its config.yaml)" in caplog.text
    assert "adapter" not in os.listdir(tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert torch.equal(logits(merged), logits(model))


def test_merge_refuses_a_folder_that_is_not_a_checkpoint_or_has_a_bad_lora_section(tmp_path):
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(tmp_path))}: not a complete honing checkpoint"):
        merge_checkpoint(str(tmp_path), str(tmp_path / "merged"))
    checkpoint = str(tmp_path / "step1")
    save_lora_checkpoint(checkpoint, trained_lora_model(), {**LORA, "rank": 0})
    expected = f"{checkpoint}/config.yaml: model.lora.rank: Input should be greater than or equal to 1"
    with pytest.raises(CheckpointError, match=f"^{re.escape(expected)}"):
        merge_checkpoint(checkpoint, str(tmp_path / "merged"))
    assert not os.path.exists(tmp_path / "merged")
