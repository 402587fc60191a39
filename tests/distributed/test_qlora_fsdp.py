"""QLoRA (NF4 base, LoRA adapters) under FSDP2 on 2 processes: the 1-process losses within 1e-4, and rank 0
gathers the sharded NF4 weights into a de-quantized, merged ``hf/`` beside the peft ``adapter/``."""

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("torchao")

from tests.distributed.runs import failure_excerpt, honing_train, metrics  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 4

CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: {steps}steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: "generated:reverse?samples=200&seed=0&letters=1"}}]}}
  chat_template: chatml
  seq_len: 128
  global_batch_size: 4
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
           num_key_value_heads: 2, intermediate_size: 128}}
  lora: {{rank: 8, alpha: 16, modules_to_save: [embed_tokens, lm_head]}}
  quantize: nf4
optim: {{lr: 1.0e-2}}
scheduler: {{name: constant}}
callbacks:
  checkpointer: {{save_interval: 2, keep_last: 1}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  console: {{plain: true}}
"""


def run(tmp_path, name, nproc=None):
    save_folder = tmp_path / name
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(save_folder=save_folder, steps=STEPS, cache=tmp_path / "cache"))
    result = honing_train(str(config), nproc=nproc, timeout=240)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return save_folder, result


def test_qlora_fsdp2_two_processes_match_one(tmp_path):
    single, _ = run(tmp_path, "single")
    sharded, result = run(tmp_path, "fsdp", nproc=2)
    assert "joined process group: rank 0 of 2" in result.stderr and "dp_shard=2" in result.stdout
    one, two = metrics(single), metrics(sharded)
    for step in range(1, STEPS + 1):
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], abs=1e-4), step
    assert one[STEPS]["train/loss"] < one[1]["train/loss"]  # the adapters did train
    merged_one, merged_two = (load_file(str(folder / "hf" / "model.safetensors")) for folder in (single, sharded))
    assert sorted(merged_one) == sorted(merged_two)
    assert all(t.dtype == torch.float32 for t in merged_two.values())  # de-quantized, full precision
    for name in merged_one:
        torch.testing.assert_close(merged_two[name], merged_one[name], atol=1e-4, rtol=0)
    assert (sharded / "adapter" / "adapter_config.json").exists()
