"""An axolotl config and a LLaMA-Factory config (``foreign/``, in each system's own layout) train 3 steps as honing
reads them, on a tiny random Llama with honing's byte tokenizer standing in for the hub model, and local rows in the
formats the configs name (alpaca rows; for LLaMA-Factory through its ``dataset_info.json``). Only what a CPU test
machine needs is changed, each with its reason."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from honing.interop.configs.loading import load_any_config
from honing.recipes import recipe_for

FOREIGN = Path(__file__).parent / "foreign"
STAND_INS = [
    "trainer.max_duration=3steps",
    "trainer.num_threads=1",
    "trainer.precision=fp32",  # the files: bf16 on a GPU; this machine is a CPU
    "data.seq_len=64",  # the files: 128 / 2048 tokens a row; the stand-in's rows are short
    "callbacks.tensorboard.enabled=false",
]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
pytestmark = pytest.mark.slow


def tiny_llama(folder: Path) -> str:
    """A 2-layer Llama of hidden size 32 with the byte tokenizer (ChatML template) beside it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    tokenizer.save_pretrained(folder)
    config = AutoConfig.for_model(
        "llama", vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def alpaca_rows() -> list[dict]:
    """Alpaca rows: reverse a word."""
    return [{"instruction": f"Reverse {word}.", "input": "", "output": word[::-1]} for word in WORDS * 4]


def sharegpt_rows() -> list[dict]:
    """ShareGPT rows: reverse a word."""
    return [
        {"conversations": [{"from": "human", "value": f"Reverse {word}."}, {"from": "gpt", "value": word[::-1]}]}
        for word in WORDS * 4
    ]


def trained_losses(folder: Path) -> list[float]:
    """The training losses a run logged."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def train(path: Path, tmp_path: Path) -> tuple:
    """Load the translated config with the stand-ins, train it; the config and its losses."""
    config = load_any_config(str(path), [*STAND_INS, f"data.cache_dir={tmp_path / 'cache'}"])
    recipe_for(config).run()
    return config, trained_losses(Path(config.trainer.save_folder))


def test_an_axolotl_lora_config_trains_three_steps(tmp_path):
    raw = yaml.safe_load((FOREIGN / "axolotl" / "lora-alpaca.yml").read_text())
    raw["base_model"] = tiny_llama(tmp_path / "model")
    (tmp_path / "alpaca.jsonl").write_text("".join(json.dumps(row) + "\n" for row in alpaca_rows()))
    raw["datasets"][0]["path"] = str(tmp_path / "alpaca.jsonl")
    raw["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "lora-alpaca.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config, losses = train(path, tmp_path)
    assert (config.method, config.model.lora.rank, config.data.packing) == ("sft", 16, True)
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert (tmp_path / "out" / "adapter" / "adapter_config.json").is_file()


def test_a_llamafactory_lora_config_trains_three_steps_on_its_dataset_info(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(FOREIGN / "llamafactory" / "data" / "dataset_info.json", data)
    (data / "identity.json").write_text(json.dumps(alpaca_rows()[:8]))
    (data / "alpaca_demo.json").write_text(json.dumps(alpaca_rows()))
    raw = yaml.safe_load((FOREIGN / "llamafactory" / "lora_sft.yaml").read_text())
    raw["model_name_or_path"] = tiny_llama(tmp_path / "model")
    raw["dataset_dir"] = str(data)
    raw["output_dir"] = str(tmp_path / "out")
    raw["dataloader_num_workers"] = 0  # the file: 4 loader processes; this machine has 2 cores
    path = tmp_path / "lora_sft.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config, losses = train(path, tmp_path)
    assert (config.method, config.model.lora.rank, config.data.validation_split) == ("sft", 8, 0.1)
    assert [source.format for source in config.data.train.sources] == ["alpaca", "alpaca"]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
