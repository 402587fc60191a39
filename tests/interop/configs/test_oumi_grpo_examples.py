"""The Oumi document's two GRPO examples as written (``use_vllm: True``; VERL_GRPO's validation set): ``honing
convert`` translates them with nothing refused, and the converted configs train 3 steps on a local tiny model and
local files in place of the hub names, VERL_GRPO's held-out prompts scored by its reward (``eval/reward``). Beside
them, how TRL's and verl's validation settings become ``grpo.validation`` and ``callbacks.evaluator``."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from honing.cli import main
from honing.config import apply_override, validate
from honing.data.chat.templates import NAMED_TEMPLATES
from honing.data.tokenizer import build_tokenizer
from honing.interop.configs import translate
from tests.e2e.test_foreign_configs import OUMI_GRPO, OUMI_VERL_GRPO
from tests.helpers import tiny_llama

FOREIGN = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs"
MOLMO_GRPO = FOREIGN / "oumi" / "recipes" / "vision" / "molmo" / "grpo" / "train.yaml"
# what the tiny run changes in the converted honing config: 3 short steps in the test's folder (2 prompts a step:
# verl's train_batch_size is global; TRL's batch, per process, is data.batch_size_per_rank)
SHORT = [
    "trainer.max_duration=3steps",
    "data.global_batch_size=2",
    "data.seq_len=96",
    "grpo.num_generations=2",
    "grpo.max_completion_length=4",
    "trainer.metrics_collect_interval=1",
]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A tiny Llama folder with a byte tokenizer (ChatML), TL;DR-style prompts and verl countdown rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("grpo_examples")
    model = root / "tiny-llama"
    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    tokenizer.save_pretrained(model)
    tiny_llama(vocab=len(tokenizer), max_position_embeddings=128, eos_token_id=tokenizer.eos_token_id).save_pretrained(
        model
    )
    long_model = root / "tiny-llama-1k"  # TinyZero's countdown prompt is ~560 bytes: a byte tokenizer's tokens
    tokenizer.save_pretrained(long_model)
    tiny_llama(vocab=len(tokenizer), max_position_embeddings=1024, eos_token_id=tokenizer.eos_token_id).save_pretrained(
        long_model
    )
    posts = ["My cat sat on the mat all day.", "The bus was late again.", "I baked bread.", "Rain all week."]
    (root / "tldr.jsonl").write_text("".join(json.dumps({"prompt": f"Summarize: {p}"}) + "\n" for p in posts))
    countdown = [
        {
            "ability": "math",
            "data_source": "countdown",
            "extra_info": {"split": "train"},
            "prompt": [{"role": "user", "content": f"Using [{a}, {b}], make {a + b}. Answer in <answer> tags."}],
            "reward_model": {"ground_truth": {"numbers": [a, b], "target": a + b}, "style": "rule"},
        }
        for a, b in [(79, 8), (3, 4), (10, 2), (5, 6)]
    ]
    pq.write_table(pa.Table.from_pylist(countdown), root / "countdown.parquet")
    # Jiayi-Pan/Countdown-Tasks-3to4 as the hub holds it: Parquet of target / nums, nothing else
    hub_rows = [{"target": a + b, "nums": [a, b]} for a, b in [(79, 8), (3, 4), (10, 2), (5, 6)]]
    pq.write_table(pa.Table.from_pylist(hub_rows), root / "countdown-tasks-3to4.parquet")
    return {
        "model": str(model),
        "long_model": str(long_model),
        "tldr": str(root / "tldr.jsonl"),
        "countdown": str(root / "countdown.parquet"),
        "countdown_hub": str(root / "countdown-tasks-3to4.parquet"),
    }


def converted(tmp_path: Path, document_yaml: str, local_names: list[str]) -> str:
    """The document's YAML with its hub names replaced by ``local_names`` (dotted changes), through ``honing
    convert``: the converted file's text."""
    raw = yaml.safe_load(document_yaml)
    for change in local_names:
        apply_override(raw, change)
    foreign, out = tmp_path / "oumi.yaml", tmp_path / "honing.yaml"
    foreign.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["convert", str(foreign), "-o", str(out)]) == 0
    return out.read_text()


def trained_metrics(tmp_path: Path, short: list[str] = SHORT) -> list[dict]:
    """Train the converted config 3 short steps; every metrics.jsonl row."""
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "honing.yaml"), f"trainer.save_folder={run}", *short]) == 0
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_documents_trl_grpo_example_converts_and_trains(local, tmp_path):
    text = converted(
        tmp_path,
        OUMI_GRPO,
        [f"model.model_name={local['model']}", f"data.train.datasets[0].dataset_path={local['tldr']}"],
    )
    assert "use_vllm: true" in text  # honing's own decoder samples where vLLM cannot (an info line at the run)
    per_rank = [change.replace("global_batch_size", "batch_size_per_rank") for change in SHORT]
    rows = trained_metrics(tmp_path, per_rank)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all("train/rewards/soft_20tokens_completions/mean" in row for row in rows)


def test_the_documents_verl_grpo_example_converts_and_trains_with_its_validation_set(local, tmp_path):
    text = converted(
        tmp_path,
        OUMI_VERL_GRPO,
        [
            f"model.model_name={local['model']}",
            f"data.train.datasets[0].dataset_path={local['countdown']}",
            f"data.validation.datasets[0].dataset_path={local['countdown']}",
        ],
    )
    config = yaml.safe_load(text)
    assert config["grpo"]["use_vllm"] is True and config["data"]["validation"]["sources"] == [
        {"path": local["countdown"], "dataset": "countdown"}  # verl's rows, made from the data set: read as they are
    ]
    assert "callbacks.evaluator.interval: 1000000000  (verl's trainer.test_freq -1:" in text  # a default filled in
    rows = trained_metrics(tmp_path)
    assert [row["step"] for row in rows if "train/loss" in row] == [1, 2, 3]
    scored = [row for row in rows if "eval/reward" in row]
    assert [row["step"] for row in scored] == [0, 3]  # verl's val_before_train, then test_freq -1: at the end
    assert "eval/rewards/verl:countdown/mean" in scored[0] and 0.0 <= scored[0]["eval/reward"] <= 1.0


def test_the_documents_verl_grpo_example_trains_on_the_hub_data_sets_own_columns(local, tmp_path):
    """The bare-bones example names Jiayi-Pan/Countdown-Tasks-3to4, whose rows are only target / nums: honing's named
    data set builds TinyZero's prompt and the columns the countdown reward reads, as Oumi does before verl."""
    text = converted(
        tmp_path,
        OUMI_VERL_GRPO,
        [
            f"model.model_name={local['long_model']}",
            f"data.train.datasets[0].dataset_path={local['countdown_hub']}",
            f"data.validation.datasets[0].dataset_path={local['countdown_hub']}",
        ],
    )
    config = yaml.safe_load(text)
    assert config["data"]["train"]["sources"] == [{"path": local["countdown_hub"], "dataset": "countdown"}]
    assert config["grpo"]["rewards"] == [{"name": "verl:countdown"}]
    run = tmp_path / "run"
    # TinyZero's prompt in bytes, rendered with ChatML: seq_len leaves room for it and the 4-token completions
    assert main(["train", str(tmp_path / "honing.yaml"), f"trainer.save_folder={run}", *SHORT, "data.seq_len=640"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "train/loss" in row] == [1, 2, 3]
    assert all("train/rewards/verl:countdown/mean" in row for row in rows if "train/loss" in row)
    scored = [row for row in rows if "eval/reward" in row]
    assert [row["step"] for row in scored] == [0, 3]  # the held-out prompts, scored by the reward before and at the end
    assert all(0.0 <= row["eval/rewards/verl:countdown/mean"] <= 1.0 for row in scored)


def test_rows_in_the_hub_data_sets_columns_without_a_name_are_refused_in_one_line_naming_it(local, tmp_path, capsys):
    text = converted(tmp_path, OUMI_VERL_GRPO, [f"model.model_name={local['long_model']}"])
    config = yaml.safe_load(text)  # the hub id as the path names the data set; a bare local copy needs dataset
    assert config["data"]["train"]["sources"] == [{"path": "Jiayi-Pan/Countdown-Tasks-3to4:train"}]
    bare = tmp_path / "bare.yaml"
    bare.write_text(
        text.replace("Jiayi-Pan/Countdown-Tasks-3to4:train", local["countdown_hub"]).replace(
            "Jiayi-Pan/Countdown-Tasks-3to4:test", local["countdown_hub"]
        )
    )
    capsys.readouterr()
    assert main(["train", str(bare), f"trainer.save_folder={tmp_path / 'run'}", *SHORT, "data.seq_len=640"]) == 2
    error = capsys.readouterr().err.strip()
    assert "cannot detect a prompt format from the keys 'target', 'nums'" in error and "\n" not in error
    assert error.endswith("set the source's dataset: countdown")


def translated(raw: dict) -> dict:
    """The translation's config (nothing refused, and valid for honing)."""
    translation = translate(copy.deepcopy(raw))
    assert translation.refused == [], translation.refused
    validate(translation.config, source="oumi")
    return translation.config


def test_trl_samples_held_out_prompts_as_its_rollouts_every_eval_steps():
    raw = yaml.safe_load(OUMI_GRPO)
    raw["data"]["validation"] = {"datasets": [{"dataset_name": "trl-lib/tldr", "split": "test"}]}
    raw["training"].update(eval_strategy="steps", eval_steps=25, per_device_train_batch_size=8)
    raw["training"]["grpo"].update(num_generations=4, temperature=0.7)
    config = translated(raw)
    assert config["grpo"]["validation"] == {"num_generations": 4, "temperature": 0.7}
    assert config["callbacks"]["evaluator"]["interval"] == 25
    del raw["training"]["eval_strategy"]  # Oumi's default "no": TRL never evaluates
    assert translated(raw)["callbacks"]["evaluator"]["enabled"] is False


def test_verls_test_freq_and_val_kwargs_become_the_evaluators_interval_and_grpo_validation():
    raw = yaml.safe_load(OUMI_VERL_GRPO)
    raw["training"]["verl_config_overrides"].update(
        trainer={"test_freq": 5, "val_before_train": False},
        actor_rollout_ref={"rollout": {"val_kwargs": {"n": 2, "temperature": 0.6, "top_p": 0.9, "do_sample": True}}},
    )
    raw["training"]["verl_config_overrides"]["data"]["val_batch_size"] = 16
    config = translated(raw)
    assert config["callbacks"]["evaluator"]["interval"] == 5 and config["callbacks"]["evaluator"]["batch_size"] == 16
    assert config["grpo"]["validation"] == {
        "num_generations": 2,
        "temperature": 0.6,
        "top_p": 0.9,
        "before_training": False,
    }
    del raw["training"]["verl_config_overrides"]["actor_rollout_ref"]["rollout"]["val_kwargs"]["do_sample"]
    assert translated(raw)["grpo"]["validation"]["temperature"] == 0.0  # verl's do_sample false: greedy


@pytest.mark.skipif(not MOLMO_GRPO.is_file(), reason=f"{MOLMO_GRPO} is absent (the source systems' configs)")
def test_oumis_published_verl_grpo_config_on_images_is_vl_grpo_with_vllm_and_its_validation_set():
    translation = translate(yaml.safe_load(MOLMO_GRPO.read_text()))
    keys = {line.split(": ")[0] for line in translation.refused}
    assert translation.get("method") == "vl_grpo" and "training.trainer_type" not in keys  # Molmo on Geometry3K
    assert not keys & {
        "training.grpo.use_vllm",
        "data.validation",
        "training.verl_config_overrides.data.val_batch_size",
    }
    assert translation.get("grpo.use_vllm") is True and translation.get("callbacks.evaluator.batch_size") == 512
