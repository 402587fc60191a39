"""Sequence parallelism (``parallel.cp=2``, Ulysses) over 2 processes trains exactly like 1 process: assistant-only
SFT on packed rows (documents split across the ranks' slices) and on padded rows, the same first 10 losses,
target counts, evaluation loss and exported weights."""

import pytest
import torch
from safetensors.torch import load_file

from tests.distributed.runs import failure_excerpt, honing_train, metrics

pytestmark = pytest.mark.slow

STEPS = 10

CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: {steps}steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: "generated:reverse?samples=256&seed=0"}}]}}
  validation: {{sources: [{{path: "generated:reverse?samples=8&seed=1"}}]}}
  chat_template: chatml
  train_on: assistant
  packing: {packing}
  seq_len: 64
  global_batch_size: 4
  micro_batch_size: 2
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 4,
           num_key_value_heads: 2, intermediate_size: 64}}
optim: {{lr: 1.0e-2}}
scheduler: {{name: cosine, warmup_steps: 2}}
callbacks:
  checkpointer: {{save_interval: {steps}, keep_last: 1}}
  evaluator: {{interval: 5}}
  sample: {{enabled: true, prompts: ["Reverse"], max_new_tokens: 4, temperature: 0}}
  console: {{plain: true}}
"""


def sft_run(tmp_path, name, packing, *overrides, nproc=None):
    save_folder = tmp_path / name
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        CONFIG.format(save_folder=save_folder, steps=STEPS, packing=str(packing).lower(), cache=tmp_path / "cache")
    )
    result = honing_train(str(config), *overrides, nproc=nproc, timeout=240)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return save_folder, result


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_two_sequence_parallel_ranks_train_like_one_process(tmp_path, packing):
    single, _ = sft_run(tmp_path, "single", packing)
    split, result = sft_run(tmp_path, "cp2", packing, "parallel.cp=2", nproc=2)
    assert "parallel cp=2" in result.stderr + result.stdout
    one, two = metrics(single), metrics(split)
    assert sorted(two) == sorted(one) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], rel=1e-5), step
        # every target once: the slices' targets, shifted on whole rows, add up to the row's
        assert two[step]["train/target_tokens"] == one[step]["train/target_tokens"], step
    assert two[STEPS]["eval/loss"] == pytest.approx(one[STEPS]["eval/loss"], rel=1e-5)
    assert one[STEPS]["train/loss"] < one[1]["train/loss"]
    exported = [load_file(str(folder / "hf" / "model.safetensors")) for folder in (single, split)]
    assert sorted(exported[0]) == sorted(exported[1])
    for name, weight in exported[0].items():
        torch.testing.assert_close(exported[1][name], weight, rtol=0, atol=1e-5, msg=name)
    assert "--- sample (step 10) ---" in result.stdout  # generation on whole rows under the Ulysses attention
