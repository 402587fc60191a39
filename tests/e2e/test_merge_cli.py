"""Run the real ``honing merge`` command on a LoRA checkpoint and on a folder that is not one."""

import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.models.lora_fixtures import LORA, logits, save_lora_checkpoint, trained_lora_model

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:torch.distributed is disabled")]

HONING = os.path.join(os.path.dirname(sys.executable), "honing")  # the installed console script


def honing(*args):
    return subprocess.run(
        [HONING, *args], capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )


def test_merge_writes_the_merged_model_and_the_adapter(tmp_path):
    model = trained_lora_model()
    checkpoint = str(tmp_path / "run" / "step3")
    save_lora_checkpoint(checkpoint, model, LORA)
    out = tmp_path / "merged"
    result = honing("merge", checkpoint, str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"merged {checkpoint} into {out}\n"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(out / "adapter"))
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(logits(merged), logits(model), rtol=0, atol=1e-5)


def test_merge_of_a_folder_that_is_not_a_checkpoint_exits_2_with_one_line(tmp_path):
    result = honing("merge", str(tmp_path), str(tmp_path / "merged"))
    assert result.returncode == 2
    assert result.stderr == (
        f"honing: error: CHECKPOINT: {tmp_path} is not a complete honing checkpoint (no .complete marker); give a "
        "SAVE_FOLDER/stepN folder that a run finished saving\n"
    )
    assert not (tmp_path / "merged").exists()
