"""A checkpoint's model: loaded (LoRA as peft), exported, and merged into a model folder plus its adapter."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from honing.errors import CheckpointError
from honing.models.wrappers import is_lora
from honing.run.checkpoint_model import export_checkpoint, load_model_from_checkpoint, merge_checkpoint
from tests.helpers import tiny_llama
from tests.models.lora_fixtures import LORA, VOCAB, logits, save_lora_checkpoint, trained_lora_model

# peft's loader asks transformers about gradient checkpointing through a name transformers 5 deprecates.
pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning"),
]


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
        4,
        8,
        ["down_proj", "q_proj", "v_proj"],
    )

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
