"""Options a machine cannot honour (issue 43 item 4): in honing's own config one line naming the key and the fix,
in a translated foreign config the nearest working choice with one note; never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml

from honing.config.model_schema import ModelSection
from honing.errors import ConfigError
from honing.interop.configs import machine_options, translate
from honing.models import attention_choice
from honing.models.attention_choice import check_attention_available
from honing.models.builder import ModelBuilder
from honing.recipes.base import run_device
from honing.train.precision import choose_precision

TINY = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "intermediate_size": 64}  # fmt: skip


def test_flash_attention_on_cpu_or_without_its_package_is_one_line_naming_the_key(monkeypatch):
    model = ModelSection(config=TINY, attn_implementation="flash_attention_2")
    with pytest.raises(ConfigError, match=r"^model.attn_implementation: 'flash_attention_2' runs on CUDA GPUs only and "
                                          r"this run is on cpu; set it to sdpa \(or auto\)$"):  # fmt: skip
        ModelBuilder(model, device=torch.device("cpu"), precision="fp32")
    # on a GPU machine without the package (transformers' own check, answered as not installed)
    monkeypatch.setattr(attention_choice, "flash_attention_usable", lambda name: False)
    with pytest.raises(ConfigError, match=r"needs the flash-attn package, which is not installed here: pip install it, "
                                          r"or set model.attn_implementation to sdpa"):  # fmt: skip
        check_attention_available("flash_attention_2", device_type="cuda")
    with pytest.raises(ConfigError, match=r"'flash_attention_3' needs the flash-attn-3"):
        check_attention_available("flash_attention_3", device_type="cuda")
    check_attention_available("flash_attention_2", device_type="cuda", available=lambda name: True)  # installed: fine
    for name in ("sdpa", "eager", "auto", None):
        check_attention_available(name, device_type="cpu")


@pytest.mark.parametrize("installed", [False, True])
def test_a_translated_config_asking_for_flash_attention_gets_sdpa_with_one_note(monkeypatch, installed):
    monkeypatch.setattr(machine_options, "flash_attention_installed", lambda name: installed)
    raw = {
        "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct", "attn_implementation": "flash_attention_2"},
        "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
        "training": {"trainer_type": "TRL_SFT"},
    }
    translation = translate(raw)
    assert translation.refused == []
    notes = [note for note in translation.notes if note.startswith("model.attn_implementation:")]
    if installed:
        assert translation.get("model.attn_implementation") == "flash_attention_2" and notes == []
    else:
        assert translation.get("model.attn_implementation") == "sdpa"
        assert notes == [
            "model.attn_implementation: 'flash_attention_2': its package (flash_attn) is not installed here, so sdpa: "
            "the same attention, without flash attention's speed (install it and set model.attn_implementation to "
            "use it)"
        ]


def test_cuda_on_a_machine_without_it_is_one_line_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^trainer.device: 'cuda', but this machine has no CUDA device; set "
                                          r"trainer.device: auto \(or cpu\)$"):  # fmt: skip
        run_device("cuda")
    assert run_device("auto") == torch.device("cpu")


def test_bf16_on_a_cpu_that_emulates_it_trains_with_one_warning():
    # emulated bf16 computes the same numbers, only slower: a warning with the measured factor, not a refusal
    choice = choose_precision("bf16-mixed", torch.device("cpu"), native_bf16=lambda: False, slowdown=lambda: 12.0)
    assert choice.precision == "bf16-mixed"
    assert "no native bf16 (bf16 matmuls measured 12x slower than fp32 here)" in choice.warning


def test_the_cli_prints_one_line_and_exits_2(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    config = {
        "method": "pretrain",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "1steps", "device": "cpu"},
        "data": {"train": {"sources": [{"path": str(corpus)}]}, "seq_len": 16, "global_batch_size": 2},
        "tokenizer": {"kind": "byte"},
        "model": {"config": TINY, "attn_implementation": "flash_attention_2"},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "honing", "train", str(path)], capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "model.attn_implementation" in line]
    assert len(errors) == 1 and "set it to sdpa (or auto)" in errors[0]
