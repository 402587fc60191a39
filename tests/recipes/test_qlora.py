"""QLoRA (``model.quantize: nf4``) on the reverse task: it learns, its first losses are LoRA's on the unquantized
weights within 2 %, a kill -9 resumes bit-identically, and the merged export answers as the adapter on the
de-quantized base does; unsupported combinations are one line and exit 2."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

pytest.importorskip("torchao")

from honing.config import validate  # noqa: E402
from honing.recipes.sft import SFTRecipe  # noqa: E402
from tests.e2e.test_cli import final_weights, honing  # noqa: E402

pytestmark = pytest.mark.slow

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
}
LORA = {"rank": 16, "alpha": 32, "modules_to_save": ["embed_tokens", "lm_head"]}


def config(folder, cache, *, steps, lr, model, generation_eval=True):
    """Single-letter reverse (a copy the tiny model learns in a few dozen steps), held-out exact match at the ends."""
    return validate(
        {
            "method": "sft",
            "trainer": {"save_folder": str(folder), "max_duration": f"{steps}steps", "num_threads": 1, "seed": 0},
            "data": {
                "train": {"sources": [{"path": "generated:reverse?samples=2000&seed=0&letters=1"}]},
                "validation": {"sources": [{"path": "generated:reverse?samples=20&seed=1&letters=1"}]},
                "chat_template": "chatml",
                "seq_len": 256,
                "global_batch_size": 16,
                "cache_dir": str(cache),
            },
            "model": model,
            "optim": {"lr": lr, "weight_decay": 0.0},
            "scheduler": {"name": "constant", "warmup_steps": 5},
            "callbacks": {
                "checkpointer": {"save_interval": 1000},
                "evaluator": {"enabled": False},
                "generation_eval": {"enabled": generation_eval, "num_prompts": 20, "max_new_tokens": 4},
                "sample": {"enabled": False},
                "console": {"enabled": False},
            },
        }
    )


def logged(folder, key):
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row[key]) for row in rows if key in row]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny model fully fine-tuned for 60 steps: it answers a quarter of the held-out prompts, so what the
    adapters add shows (LoRA on a random model sits on a plateau for hundreds of steps)."""
    root = tmp_path_factory.mktemp("qlora")
    SFTRecipe(config(root / "base", root / "cache", steps=60, lr=3e-3, model={"config": TINY})).run()
    return root


@pytest.fixture(scope="module")
def qlora(base):
    folder = base / "qlora"
    model = {"name_or_path": str(base / "base" / "hf"), "lora": LORA, "quantize": "nf4"}
    recipe = SFTRecipe(config(folder, base / "cache", steps=100, lr=1e-2, model=model))
    recipe.run()
    return folder, recipe


def test_qlora_learns_the_task(qlora):
    folder, recipe = qlora
    from honing.models.quantize import is_quantized

    quantized = [name for name, p in recipe.model.named_parameters() if is_quantized(p)]
    assert len(quantized) == 2 * 7  # q, k, v, o, gate, up, down of both layers
    exact = dict(logged(folder, "eval/exact_match"))
    assert exact[100] >= exact[0] + 0.3, exact  # measured: 0.25 -> 0.9


def test_first_losses_within_two_percent_of_lora(base):
    losses = {}
    for quantize in (None, "nf4"):
        folder = base / f"first-{quantize}"
        model = {"name_or_path": str(base / "base" / "hf"), "lora": LORA, "quantize": quantize}
        SFTRecipe(config(folder, base / "cache", steps=5, lr=1e-3, model=model, generation_eval=False)).run()
        losses[quantize] = [loss for _, loss in logged(folder, "train/loss")]
    for lora, qlora in zip(losses[None], losses["nf4"]):
        assert qlora == pytest.approx(lora, rel=0.02), losses


def test_merged_export_answers_as_the_adapter_on_the_dequantized_base(qlora, base):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from honing.models.quantize import dequantize

    folder, recipe = qlora
    merged = AutoModelForCausalLM.from_pretrained(folder / "hf")
    assert all(p.dtype == torch.float32 for p in merged.parameters())  # full precision, not quantized
    # the base the adapter trained on, de-quantized: the quantized weights' values under the pretrained names
    dequantized = AutoModelForCausalLM.from_pretrained(base / "base" / "hf")
    trained = {
        name.replace("base_model.model.", "").replace(".base_layer", ""): p
        for name, p in recipe.model.named_parameters()
    }
    with torch.no_grad():
        for name, param in dequantized.named_parameters():
            if name in trained and trained[name].shape == param.shape and "lora" not in name:
                param.copy_(dequantize(trained[name].detach()))
    adapted = PeftModel.from_pretrained(dequantized, folder / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(folder / "hf")
    answers = {}
    for label, model in (("merged", merged), ("adapter", adapted)):
        model.eval()
        outs = []
        for letter in "abcxyz":
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": f"Reverse the letters: {letter}"}],
                tokenize=False,
                add_generation_prompt=True,
            )
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
            out = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            outs.append(tokenizer.decode(out[0, ids.shape[1] :]))
        answers[label] = outs
    assert answers["merged"] == answers["adapter"]
    assert sum(answer.startswith(letter) for answer, letter in zip(answers["merged"], "abcxyz")) >= 3, answers


KILL_CONFIG = """
method: sft
trainer: {{save_folder: {save_folder}, max_duration: 60steps, num_threads: 1, seed: 0}}
data:
  train: {{sources: [{{path: "generated:reverse?samples=400&seed=0&letters=1"}}]}}
  chat_template: chatml
  seq_len: 128
  global_batch_size: 4
  cache_dir: {cache}
model:
  config: {{model_type: llama, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
           num_key_value_heads: 2, intermediate_size: 128}}
  lora: {{rank: 8, alpha: 16, modules_to_save: [embed_tokens, lm_head]}}
  quantize: nf4
optim: {{lr: 1.0e-3}}
callbacks:
  checkpointer: {{save_interval: 10, async_save: true}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  console: {{plain: true}}
"""


# full fine-tuning with 8-bit AdamW states (a QLoRA run's adapters are too small for 8-bit states: under 4,096 values)
EIGHT_BIT = {"  lora: {{rank: 8, alpha: 16, modules_to_save: [embed_tokens, lm_head]}}\n  quantize: nf4\n": "",
             "optim: {{lr: 1.0e-3}}": "optim: {{lr: 1.0e-3, state_dtype: int8}}"}  # fmt: skip


@pytest.mark.parametrize("variant", ["qlora-nf4", "adamw-8bit"])
def test_kill_9_then_rerun_gives_identical_weights(tmp_path, variant):
    template = KILL_CONFIG
    for old, new in EIGHT_BIT.items() if variant == "adamw-8bit" else ():
        assert old in template
        template = template.replace(old, new)

    def write(name):
        path = tmp_path / f"{name}.yaml"
        path.write_text(template.format(save_folder=tmp_path / name, cache=tmp_path / "cache"))
        return str(path), tmp_path / name

    config_path, expected_folder = write("reference")
    assert honing("train", config_path).returncode == 0
    config_path, save_folder = write("killed")
    process = subprocess.Popen(
        [sys.executable, "-m", "honing", "train", config_path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while not (save_folder / "step10").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.3))  # a random moment: mid-save, or a few steps later
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (save_folder / "hf").exists(), "the run finished before it was killed; the test proves nothing"
    result = honing("train", config_path)
    assert result.returncode == 0, result.stderr
    expected, actual = final_weights(expected_folder), final_weights(save_folder)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.lora=null", "model.quantize=nf4"], "model.quantize: 'nf4' needs model.lora"),
        (["parallel.activation_offload=true"], "parallel.activation_offload: true moves saved activations"),
    ],
)
def test_unsupported_combination_is_one_line_exit_2(tmp_path, overrides, message):
    path = tmp_path / "run.yaml"
    path.write_text(KILL_CONFIG.format(save_folder=tmp_path / "run", cache=tmp_path / "cache"))
    result = honing("train", str(path), "trainer.max_duration=1steps", *overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("honing: error:")]
    assert len(lines) == 1 and message in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_skip_modules_train_in_full_precision_and_the_export_reads_the_checkpoint(tmp_path):
    # Oumi's Falcon-H1 QLoRA recipe keeps a projection unquantized (llm_int8_skip_modules): here o_proj
    from honing.models.quantize import is_quantized
    from honing.run.checkpoint_model import load_model_from_checkpoint

    model = {"config": TINY, "lora": LORA, "quantize": "nf4", "quantize_skip_modules": ["o_proj"]}
    recipe = SFTRecipe(
        config(tmp_path / "run", tmp_path / "cache", steps=2, lr=1e-3, model=model, generation_eval=False)
    )
    recipe.run()
    weights = {name: p for name, p in recipe.model.named_parameters() if name.endswith(".weight")}
    assert sum(is_quantized(p) for p in weights.values()) == 2 * 6  # every decoder linear but o_proj
    assert not any(is_quantized(p) for name, p in weights.items() if "o_proj" in name)
    # the checkpoint is read back quantized the same way (o_proj plain), so its state dict fits
    reloaded, _ = load_model_from_checkpoint(str(tmp_path / "run" / "step2"))
    assert not any(is_quantized(p) for name, p in reloaded.named_parameters() if "o_proj" in name)
