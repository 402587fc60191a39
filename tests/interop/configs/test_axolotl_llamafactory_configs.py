"""axolotl's and LLaMA-Factory's configs, in each system's own layout (``foreign/axolotl``, ``foreign/llamafactory``
with its ``data/dataset_info.json``), as honing reads them: ``honing convert`` gives a config honing's schema
accepts, with the values each key asks for; a file with keys honing cannot honour is refused in one line naming
each of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from honing.config import ConfigError
from honing.interop.configs import convert_file, detect_dialect, translate
from honing.interop.configs.hf_engines import fp16_available

FOREIGN = Path(__file__).parent / "foreign"
LF_DATA = FOREIGN / "llamafactory" / "data"

# file -> honing keys the translation must give (values written in the honing key's own terms)
AXOLOTL = {
    "lora-alpaca.yml": {
        "method": "sft",
        "model.lora": {"rank": 16, "alpha": 32.0, "dropout": 0.05, "target_modules": "all-linear"},
        "data.train.sources": [{"path": "data/alpaca.jsonl", "format": "alpaca"}],
        "data.validation_split": 0.1,
        "data.packing": True,
        "data.micro_batch_size": 2,
        "data.batch_size_per_rank": 4,  # micro_batch_size x gradient_accumulation_steps
        "parallel.activation_checkpointing": "full",
        "scheduler.warmup_steps": 2,
        "callbacks.checkpointer.save_at_epoch_end": True,  # saves_per_epoch: 1
    },
    "qlora-chat-template.yml": {
        "model.quantize": "nf4",
        "model.lora.target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "data.train.sources": [{"path": "data/sharegpt.jsonl", "format": "sharegpt"}],
        "data.chat_template": "chatml",
        "optim.state_dtype": "int8",  # paged_adamw_8bit
        "scheduler.name": "linear",
        "scheduler.warmup_ratio": 0.1,
        "trainer.max_duration": "2epochs",
        "trainer.seed": 7,
        "callbacks.checkpointer.keep_last": 2,
        "callbacks.wandb.project": "qlora-test",
    },
    "full-fsdp.yml": {
        "model.lora": None,
        "data.validation.sources": [{"path": "data/messages-valid.jsonl", "format": "conversation"}],
        "parallel.strategy": "fsdp",
        "parallel.activation_checkpointing": "full",
        "trainer.max_duration": "20steps",
        "trainer.precision": "bf16-mixed",
        "callbacks.evaluator.interval": 5,
    },
    "dpo.yml": {
        "method": "dpo",
        "dpo.beta": 0.2,
        "data.train.sources": [{"path": "data/dpo.jsonl", "format": "preference"}],
    },
    "deepspeed-zero2.yml": {  # zero2.json beside it: ZeRO-2 with the optimizer on the host
        "parallel.strategy": "fsdp",
        "parallel.reshard_after_forward": False,
        "parallel.offload": "optimizer",
    },
    "pretrain.yml": {
        "method": "pretrain",
        "data.train.sources": [{"path": "data/docs.jsonl", "text_field": "body"}],
        "trainer.max_duration": "10steps",
    },
}
LLAMAFACTORY = {
    "lora_sft.yaml": {
        "method": "sft",
        "model.lora": {"rank": 8, "alpha": 16.0, "dropout": 0.0, "target_modules": "all-linear"},
        "data.train.sources": [
            {"path": str(LF_DATA / "identity.json"), "format": "alpaca", "max_samples": 1000},
            {"path": str(LF_DATA / "alpaca_demo.json"), "format": "alpaca", "max_samples": 1000},
        ],
        "data.seq_len": 2048,
        "data.validation_split": 0.1,
        "data.batch_size_per_rank": 8,
        "scheduler.name": "cosine",
        "scheduler.warmup_ratio": 0.1,
        "trainer.precision": "bf16-mixed",
        "trainer.max_duration": "3epochs",
        "trainer.load_strategy": "never",  # overwrite_output_dir
        "callbacks.evaluator.interval": 500,
    },
    "full_sft_ds3.yaml": {
        "model.lora": None,
        "data.train.sources": [
            {"path": str(LF_DATA / "glaive_demo.json"), "format": "sharegpt"},
            {"path": str(LF_DATA / "messages_demo.json"), "format": "conversation"},
        ],
        "data.packing": True,
        "parallel.strategy": "fsdp",
        "parallel.offload": "params",
        "callbacks.wandb.enabled": True,
        "run_name": "full-sft",
    },
    "lora_dpo.yaml": {
        "method": "dpo",
        "dpo": {"beta": 0.2, "rpo_alpha": 0.5},
        "model.lora.target_modules": ["q_proj", "v_proj"],
        "data.train.sources": [{"path": str(LF_DATA / "dpo_demo.json"), "format": "preference_sharegpt"}],
    },
    "lora_orpo.yaml": {"method": "orpo", "orpo.beta": 0.1, "trainer.max_duration": "100steps"},
    "lora_pretrain.yaml": {
        "method": "pretrain",
        "data.train.sources": [{"path": str(LF_DATA / "c4_demo.jsonl"), "format": "auto"}],
    },
    "qlora_sft.yaml": {
        "model.quantize": "nf4",
        "data.chat_template": "llama3",
        "data.train.sources": [{"path": "llamafactory/alpaca_en:train", "format": "alpaca", "max_samples": 100}],
    },
}


def translated(folder: str, name: str):
    """The translation of one test config (files it names are found beside it)."""
    path = FOREIGN / folder / name
    translation = translate(yaml.safe_load(path.read_text()), str(path))
    assert translation.refused == [], translation.refused
    return translation


@pytest.mark.parametrize("name, expected", AXOLOTL.items(), ids=list(AXOLOTL))
def test_axolotl_configs(name, expected):
    translation = translated("axolotl", name)
    assert translation.dialect == "axolotl"
    assert {key: translation.get(key) for key in expected} == expected
    convert_file(str(FOREIGN / "axolotl" / name))  # honing's schema accepts it


@pytest.mark.parametrize("name, expected", LLAMAFACTORY.items(), ids=list(LLAMAFACTORY))
def test_llamafactory_configs(name, expected):
    translation = translated("llamafactory", name)
    assert translation.dialect == "LLaMA-Factory"
    assert {key: translation.get(key) for key in expected} == expected
    convert_file(str(FOREIGN / "llamafactory" / name))


def test_axolotl_keys_honing_cannot_honour_are_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        convert_file(str(FOREIGN / "axolotl" / "refused.yml"))
    message = str(caught.value)
    assert "\n" not in message
    for key in ("lr_scheduler: 'one_cycle'", "xformers_attention:", "peft_use_dora:"):
        assert key in message


def test_llamafactory_keys_and_columns_honing_cannot_honour_are_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        convert_file(str(FOREIGN / "llamafactory" / "refused.yaml"))
    message = str(caught.value)
    assert "\n" not in message
    assert "stage: 'ppo' is not available" in message
    assert "use_galore:" in message
    # renamed_demo's columns (question / answer for honing's alpaca instruction / output) are mapped, not refused
    assert "renamed_demo" not in message


def test_a_misspelt_key_is_refused_naming_the_schema():
    translation = translate({**yaml.safe_load((FOREIGN / "axolotl" / "dpo.yml").read_text()), "lora_rr": 8})
    assert any(line.startswith("lora_rr: not a key of axolotl") for line in translation.refused)


def test_fp16_is_fp16_mixed_where_honing_has_it():
    translation = translate({**yaml.safe_load((FOREIGN / "axolotl" / "dpo.yml").read_text()), "fp16": True})
    if fp16_available():
        assert translation.get("trainer.precision") == "fp16-mixed"
    else:
        assert translation.refused[0].startswith("fp16: not yet")


def test_dialects_are_told_apart():
    assert detect_dialect(yaml.safe_load((FOREIGN / "axolotl" / "dpo.yml").read_text())) == "axolotl"
    assert detect_dialect(yaml.safe_load((FOREIGN / "llamafactory" / "lora_dpo.yaml").read_text())) == "llamafactory"
    assert detect_dialect({"method": "sft", "model": {"name_or_path": "x"}}) is None
