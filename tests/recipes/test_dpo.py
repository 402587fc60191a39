"""The DPO recipe: the three references agree, metrics under TRL's names, the precompute cache, resume after kill -9."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from honing.config import validate
from honing.errors import ConfigError
from honing.recipes.dpo import DPORecipe
from tests.e2e.test_cli import final_weights, honing
from tests.recipes.pair_runs import pair_run

METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)


def dpo_config(tmp_path, name="run", **sections):
    return validate(pair_run(tmp_path, "dpo", name, steps=2, validation_samples=8, **sections))


def metrics(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_three_references_give_the_same_first_steps(tmp_path):
    runs = {}
    for reference in ("copy", "adapters_off", "precompute"):
        DPORecipe(dpo_config(tmp_path, reference, dpo={"reference": reference, "beta": 0.5})).run()
        runs[reference] = [row for row in metrics(tmp_path / reference) if "train/loss" in row]
    first = runs["copy"][0]
    assert first["train/loss"] == pytest.approx(0.693147, abs=1e-6)  # policy = reference at step 1: log 2
    for reference in ("adapters_off", "precompute"):
        for step, row in enumerate(runs[reference]):
            for key in ("train/loss", *(f"train/{m}" for m in METRICS)):
                assert row[key] == pytest.approx(runs["copy"][step][key], abs=1e-6), (reference, step, key)
    last = metrics(tmp_path / "copy")[-1]
    assert all(f"eval/{name}" in last for name in METRICS) and "eval/loss" in last
    assert (tmp_path / "copy" / "best" / "config.json").exists()  # chosen by eval/rewards/accuracies
    assert (tmp_path / "precompute" / "adapter" / "adapter_config.json").exists()


def test_precomputed_reference_is_cached_by_model_and_data(tmp_path, capsys):
    DPORecipe(dpo_config(tmp_path, "a", dpo={"reference": "precompute"})).run()
    assert "computed and cached" in capsys.readouterr().out
    cache = tmp_path / "cache" / "dpo_reference"
    assert len(list(cache.glob("*.pt"))) == 2  # training and validation pairs
    DPORecipe(dpo_config(tmp_path, "b", dpo={"reference": "precompute"})).run()
    assert "computed and cached" not in capsys.readouterr().out
    other = {"train": {"sources": [{"path": "generated:addition_preference?samples=32&seed=5"}]}}
    DPORecipe(dpo_config(tmp_path, "c", dpo={"reference": "precompute"}, data=other)).run()
    assert len(list(cache.glob("*.pt"))) == 3


def test_adapters_off_needs_lora(tmp_path):
    config = dpo_config(tmp_path, dpo={"reference": "adapters_off"})
    config = config.model_copy(update={"model": config.model.model_copy(update={"lora": None})})
    with pytest.raises(ConfigError, match="adapters_off' needs model.lora"):
        DPORecipe(config).run()


def test_label_smoothing_is_refused_outside_the_losses_that_read_it(tmp_path):
    with pytest.raises(
        ConfigError, match=r"label_smoothing is used by loss_type robust, exo_pair, aot, aot_unpaired only"
    ):
        dpo_config(tmp_path, dpo={"label_smoothing": 0.1})


CONFIG = """
method: dpo
trainer: {{save_folder: {save_folder}, max_duration: 200steps, num_threads: 1, cancel_check_interval: 1}}
data:
  train: {{sources: [{{path: "generated:addition_preference?samples=256&seed=0"}}]}}
  chat_template: chatml
  seq_len: 64
  global_batch_size: 4
  micro_batch_size: 2
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 64, attention_dropout: 0.1}}
  disable_dropout: false  # dropout on (DPO's default is off, as TRL's): the resume restores its RNG too
dpo: {{reference: {reference}, rpo_alpha: 0.5}}
callbacks:
  checkpointer: {{save_interval: 7, async_save: true}}
  sample: {{enabled: false}}
  console: {{plain: true}}
"""


@pytest.mark.slow
def test_kill_9_then_rerun_gives_identical_weights(tmp_path):
    # precompute: the rerun also reads the reference log-probs back from the cache the first attempt wrote
    def write(name):
        path = tmp_path / f"{name}.yaml"
        path.write_text(CONFIG.format(save_folder=tmp_path / name, cache=tmp_path / "cache", reference="precompute"))
        return str(path), tmp_path / name

    config, expected_folder = write("reference")
    started = time.time()
    assert honing("train", config).returncode == 0
    duration = time.time() - started
    config, save_folder = write("killed")
    process = subprocess.Popen(
        [sys.executable, "-m", "honing", "train", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not (save_folder / "step7").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    # a random moment, possibly mid-step or mid-save; the reference run's time is mostly its start and the
    # reference log-probs, its 200 steps take a few seconds: a quarter of it outlasted them once in CI
    time.sleep(random.uniform(0.0, duration / 20))
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (save_folder / "hf").exists(), "the run finished before it was killed; the test proves nothing"
    result = honing("train", config)
    assert result.returncode == 0, result.stderr
    expected, actual = final_weights(expected_folder), final_weights(save_folder)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
