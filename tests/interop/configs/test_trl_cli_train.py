"""Two of TRL's own examples trained 2 steps as translated (``foreign/trl``): its example YAML (``trl sft --config``)
and its DPO script's LoRA command line, with stand-ins for what cannot be here: the hub model is a tiny random Qwen2
with honing's byte tokenizer, the hub data set a few local rows in that data set's own columns. Everything else stays
as TRL's file has it (learning rate, cosine schedule, batch sizes, LoRA rank and alpha, DPO's defaults)."""

from __future__ import annotations

import json

import yaml

from honing.interop.configs.loading import load_any_config
from honing.recipes import recipe_for
from tests.interop.configs.test_published_configs_train import losses, text_stand_in, write_jsonl
from tests.interop.configs.trl_cli_examples import FOLDER, examples

# what a CPU test machine stands in for (honing's keys, applied after the translation)
STAND_INS = [
    "trainer.max_duration=2steps",
    "trainer.num_threads=1",
    "trainer.precision=fp32",  # TRL's bf16 default: emulated on this CPU, slower and the same test
    "data.seq_len=64",
    "data.micro_batch_size=2",  # TRL's 8 per device: 2 rows keep a step of this test short
    "data.batch_size_per_rank=2",
]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def trained(tmp_path, raw: dict, command: str, rows: list[dict], extra: list[str]) -> tuple:
    """``raw`` written as a TRL CLI file, translated with ``--from command`` onto the stand-ins, trained; the config
    and the losses."""
    model = text_stand_in(tmp_path / "tiny-qwen2", "qwen2")
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump(raw))
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    overrides = [*STAND_INS, f"model.name_or_path={model}", f"trainer.save_folder={tmp_path / 'out'}",
                 f"data.train.sources=[{{path: {data}}}]", f"data.cache_dir={tmp_path / 'cache'}", *extra]  # fmt: skip
    config = load_any_config(str(path), overrides, command)
    recipe_for(config).run()
    return config, losses(tmp_path / "out")


def test_trls_example_yaml_trains_as_sft(tmp_path):
    raw = yaml.safe_load((FOLDER / "example_config.yaml").read_text())
    rows = [{"text": f"The film {word} was {'good' if i % 2 else 'bad'}."} for i, word in enumerate(WORDS * 2)]
    config, steps = trained(tmp_path, raw, "trl-sft", rows, [])  # stanfordnlp/imdb: a text column
    assert (config.method, config.optim.lr, config.scheduler.name) == ("sft", 0.0001, "cosine")
    assert len(steps) == 2 and all(loss > 0 for loss in steps)


def test_trls_dpo_lora_command_line_trains(tmp_path):
    raw = next(
        values for where, _, values in examples() if where.startswith("trl/scripts/dpo.py") and "use_peft" in values
    )
    raw = {**raw, "eval_strategy": "no"}  # the test split's stand-in: none here
    rows = [  # trl-lib/ultrafeedback_binarized: the prompt, and whole conversations chosen and rejected
        {
            "prompt": f"Reverse {word}.",
            "chosen": [{"role": "user", "content": f"Reverse {word}."}, {"role": "assistant", "content": word[::-1]}],
            "rejected": [{"role": "user", "content": f"Reverse {word}."}, {"role": "assistant", "content": word}],
        }
        for word in WORDS
    ]
    config, steps = trained(tmp_path, raw, "trl-dpo", rows, [])
    assert config.method == "dpo" and (config.model.lora.rank, config.model.lora.alpha) == (32, 16.0)
    # DPO's first loss: the policy is its reference (LoRA's B is zero), so -log sigmoid(0) = log 2
    assert abs(steps[0] - 0.6931) < 1e-3 and len(steps) == 2
    assert json.loads((tmp_path / "out" / "hf" / "config.json").read_text())["model_type"] == "qwen2"
