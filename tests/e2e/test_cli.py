"""Run the real ``honing`` command in subprocesses: training, resume after kill -9, errors, export."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

CONFIG = """
method: pretrain
trainer:
  save_folder: {save_folder}
  max_duration: {steps}steps
  num_threads: 1
  metrics_collect_interval: 2
  cancel_check_interval: 1
data:
  train:
    sources: [{{path: "{{stdlib}}/json/*.py"}}]
  validation_split: 0.2
  seq_len: 64
  global_batch_size: 4
  micro_batch_size: 2
tokenizer: {{kind: byte}}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64, attention_dropout: 0.1}}
optim: {{lr: 3.0e-3}}
scheduler: {{name: cosine, warmup_steps: 2}}
callbacks:
  checkpointer: {{save_interval: {save_interval}, async_save: {async_save}}}
  evaluator: {{interval: 5, max_batches: 2}}
  sample: {{prompts: ["def "], max_new_tokens: 8}}
  console: {{plain: true}}
"""


def write_config(tmp_path, name, *, steps=20, save_interval=5, async_save="true"):
    save_folder = tmp_path / name
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        CONFIG.format(save_folder=save_folder, steps=steps, save_interval=save_interval, async_save=async_save)
    )
    return str(path), save_folder


def honing(*args, **kwargs):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "honing", *args], capture_output=True, text=True, env=env, timeout=300, **kwargs
    )


def final_weights(save_folder):
    return load_file(str(save_folder / "hf" / "model.safetensors"))


def test_train_writes_everything_and_exports_loadable_model(tmp_path):
    config, save_folder = write_config(tmp_path, "run", steps=10)
    result = honing("train", config)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 11))
    for key in ("train/loss", "optim/lr", "throughput/tokens_per_s", "throughput/total_tokens"):
        assert key in rows[-1], key
    assert any("eval/loss" in r for r in rows)
    assert rows[-1]["throughput/total_tokens"] == 10 * 4 * 64
    assert "step 10/10" in result.stdout
    assert "--- sample" in result.stdout
    assert (save_folder / "config.yaml").exists() and (save_folder / "step10" / "config.yaml").exists()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(save_folder / "hf")
    tokenizer = AutoTokenizer.from_pretrained(save_folder / "hf")
    ids = tokenizer("def f(x):", return_tensors="pt")["input_ids"]
    assert tokenizer.decode(ids[0]) == "def f(x):"
    assert model(ids).logits.shape == (1, ids.shape[1], len(tokenizer))

    exported = tmp_path / "exported"
    result = honing("export", str(save_folder / "step10"), str(exported))
    assert result.returncode == 0, result.stderr
    again = load_file(str(exported / "model.safetensors"))
    for name, tensor in final_weights(save_folder).items():
        assert torch.equal(again[name], tensor), name


def test_kill_9_then_rerun_gives_identical_weights(tmp_path):
    config, reference = write_config(tmp_path, "reference", steps=200, save_interval=7)
    started = time.time()
    assert honing("train", config).returncode == 0
    duration = time.time() - started

    config, save_folder = write_config(tmp_path, "killed", steps=200, save_interval=7)
    process = subprocess.Popen(
        [sys.executable, "-m", "honing", "train", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not (save_folder / "step7").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    # a random moment in the rest of the run, possibly mid-step or mid-save; the run's time is mostly starting
    # Python and building the model, so a quarter of it outlasted the steps left once on a loaded machine
    time.sleep(random.uniform(0.0, duration / 20))
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (save_folder / "hf").exists(), "the run finished before it was killed; the test proves nothing"

    result = honing("train", config)
    assert result.returncode == 0, result.stderr
    expected, actual = final_weights(reference), final_weights(save_folder)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_sigterm_cancels_gracefully(tmp_path):
    config, save_folder = write_config(tmp_path, "term", steps=100000, save_interval=1000)
    process = subprocess.Popen(
        [sys.executable, "-m", "honing", "train", config], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    while not (save_folder / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "received SIGTERM" in stdout
    steps = [int(p.name[4:]) for p in save_folder.iterdir() if p.name.startswith("step")]
    assert len(steps) == 1 and (save_folder / f"step{steps[0]}" / ".complete").exists()
    assert (save_folder / "hf" / "model.safetensors").exists()


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.max_durration=3steps", "trainer.max_durration: unknown key; did you mean trainer.max_duration?"),
        ("trainer.seed=abc", "trainer.seed: Input should be a valid integer"),
        ("data.train.sources=[{path: /nonexistent/*.txt}]", "/nonexistent/*.txt"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, override, message):
    config, _ = write_config(tmp_path, "bad")
    result = honing("train", config, override)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file(tmp_path):
    result = honing("train", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "missing.yaml: config file not found" in result.stderr


def test_config_show_and_schema(tmp_path):
    config, _ = write_config(tmp_path, "show")
    result = honing("config", "show", config, "optim.lr=0.5")
    assert result.returncode == 0 and "lr: 0.5" in result.stdout
    result = honing("config", "schema")
    schema = json.loads(result.stdout)
    assert "trainer" in schema["properties"] and "max_duration" in json.dumps(schema)
    max_duration = schema["$defs"]["TrainerSection"]["properties"]["max_duration"]
    assert max_duration["description"].startswith("How long to train: ``200steps``")


def test_config_keys_prints_each_key_with_its_default_and_description():
    result = honing("config", "keys", "trainer")
    assert result.returncode == 0, result.stderr
    assert "trainer.cancel_check_interval: int, >= 1 = 1\n    SIGTERM / Ctrl-C is exchanged" in result.stdout
    assert "trainer.load_path: str or null = null\n" in result.stdout and "data." not in result.stdout
    result = honing("config", "keys", "--method", "pretrain")
    assert "data.document_masking: bool = false\n" in result.stdout and "data.chat_template" not in result.stdout
    assert "data.train.sources[].format: " in result.stdout and "[pretrain: auto, text, jsonl, tokens]" in result.stdout
    result = honing("config", "keys", "trainr")
    assert result.returncode == 2 and "config keys: no key under 'trainr'; the sections are: " in result.stderr
