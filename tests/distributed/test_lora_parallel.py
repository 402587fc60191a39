"""LoRA under FSDP2 and DDP (``honing train --nproc 2``): the same losses as one process, and rank 0 gathers
the (FSDP2-sharded) adapters and ``modules_to_save`` into the merged ``hf/``, the peft ``adapter/`` and
``best/``."""

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.distributed.runs import failure_excerpt, honing_train, metrics

pytestmark = pytest.mark.slow

STEPS = 4

CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: {steps}steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: "generated:reverse?samples=64&seed=0"}}]}}
  validation: {{sources: [{{path: "generated:reverse?samples=8&seed=1"}}]}}
  chat_template: chatml
  seq_len: 128
  global_batch_size: 4
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64}}
  lora: {{rank: 4, alpha: 8, dropout: 0.0, modules_to_save: [embed_tokens, lm_head]}}
optim: {{lr: 1.0e-2}}
scheduler: {{name: constant, warmup_steps: 0}}
callbacks:
  checkpointer: {{save_interval: 2, keep_last: 1}}
  evaluator: {{interval: 2, metric_for_best_model: eval/loss}}
  generation_eval: {{enabled: true, num_prompts: 2, max_new_tokens: 4}}
  sample: {{enabled: true, prompts: ["Reverse"], max_new_tokens: 4, temperature: 0}}
  console: {{plain: true}}
"""


def lora_run(tmp_path, name, strategy=None):
    save_folder = tmp_path / name
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(save_folder=save_folder, steps=STEPS, cache=tmp_path / "cache"))
    result = honing_train(
        str(config),
        *([f"parallel.strategy={strategy}"] if strategy else []),
        nproc=2 if strategy else None,
        timeout=240,
    )
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return save_folder, result


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return lora_run(tmp_path_factory.mktemp("lora"), "single")


@pytest.fixture(scope="module", params=["fsdp", "ddp"])
def runs(request, single, tmp_path_factory):
    return single, lora_run(tmp_path_factory.mktemp("lora"), request.param, request.param)


def test_lora_two_processes_match_one(runs):
    (single, _), (sharded, result) = runs
    assert "joined process group: rank 0 of 2" in result.stderr
    one, two = metrics(single), metrics(sharded)
    assert sorted(two) == sorted(one)
    for step in range(1, STEPS + 1):
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], abs=1e-5), step
        assert two[step]["optim/grad_norm"] == pytest.approx(one[step]["optim/grad_norm"], abs=1e-5), step
    assert two[STEPS]["eval/loss"] == pytest.approx(one[STEPS]["eval/loss"], abs=1e-5)
    assert one[STEPS]["train/loss"] < one[1]["train/loss"]  # the adapters did train


def test_generation_eval_shares_prompts_out_under_ddp_only(runs):
    (single, _), (parallel, result) = runs
    shared = "generation evaluation: 2 prompts shared out over 2 ranks" in result.stderr
    assert shared == ("ddp" in parallel.name)  # FSDP2's sharded model needs every rank in every forward

    def rows(folder):
        lines = (folder / "generation_eval.jsonl").read_text().splitlines()
        return [{key: row[key] for key in ("step", "expected", "answer")} for row in map(json.loads, lines)]

    assert rows(parallel) == rows(single)  # every prompt once, in order, answered alike
    one, two = metrics(single), metrics(parallel)
    assert two[STEPS]["eval/exact_match"] == one[STEPS]["eval/exact_match"]


def test_lora_two_processes_export_gathered_merged_model_adapter_and_best(runs):
    (single, _), (sharded, result) = runs
    for folder, file in (
        ("hf", "model.safetensors"),
        ("best", "model.safetensors"),
        ("adapter", "adapter_model.safetensors"),
    ):
        left, right = load_file(str(single / folder / file)), load_file(str(sharded / folder / file))
        assert sorted(left) == sorted(right), folder
        for name in left:  # full, unsharded shapes and the same numbers as the one-process run
            torch.testing.assert_close(right[name], left[name], atol=1e-5, rtol=0, msg=f"{folder}: {name}")
        merged = folder != "adapter"
        assert any("lora_" in name for name in right) != merged, folder
    assert "--- sample (step 4) ---" in result.stdout
