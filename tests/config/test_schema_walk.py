"""Every key of the run config, for every method, is read by that method's recipe or refused by validation.

"Read" is proven, not declared: each method's recipe runs two steps under ``track_reads`` from configs that turn
every optional feature on (``SCENARIOS``), and a key counts as used only when the run read it. Each key the runs
left unread must be refused for that method by ``honing.config.methods`` with one line naming the key and the
method, and this test sets it to prove it. A new method adds its scenarios here.
"""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from honing.config import ConfigError, leaf_keys, track_reads, validate
from honing.config.keys import section_type
from honing.config.methods import METHODS, refused_key
from honing.config.schema import RunConfig
from tests.config.online_dpo_scenario import online_dpo_runs
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

MODEL = TINY_LLAMA_CONFIG


# the generation eval's metrics: its own two and a reward of the registry
GENERATION_METRICS = ["exact_match", "cer", "answer_similarity"]

WALK_TASK = """task: walk_task
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
output_type: generate_until
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list: [{{metric: exact_match, aggregation: mean, higher_is_better: true}}]
generation_kwargs: {{until: ["\\n"], do_sample: false}}
"""


def harness_task(folder: Path) -> Path:
    """A two-row lm-eval task over a local file (callbacks.harness_eval); the folder holding it."""
    tasks = folder / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "data.jsonl").write_text('{"question": "ab", "answer": "ba"}\n{"question": "cd", "answer": "dc"}\n')
    (tasks / "walk_task.yaml").write_text(WALK_TASK.format(data=tasks / "data.jsonl"))
    return tasks


def harness_eval(folder: Path) -> dict[str, Any]:
    """Every key of callbacks.harness_eval, evaluating once, at the end."""
    return {
        "enabled": True,
        "tasks": ["walk_task"],
        "include": [str(harness_task(folder))],
        "interval": 1000,
        "limit": 2,
        "num_fewshot": 0,
        "batch_size": 2,
        "max_new_tokens": 2,
        "apply_chat_template": False,
    }


class FakeHub:
    """huggingface_hub.HfApi's two calls callbacks.hub makes, answered here: the walk runs offline."""

    def create_repo(self, repo_id: str, **options: Any) -> Any:
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def upload_folder(self, **options: Any) -> str:
        return f"https://huggingface.co/{options['repo_id']}/commit/walk"


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch):
    """callbacks.hub pushes to ``FakeHub``."""
    monkeypatch.setattr("honing.train.callbacks.hub_upload.default_api", FakeHub)


def shared(folder: Path, method: str) -> dict[str, Any]:
    """Every feature both methods have, turned on, for a two-step CPU run."""
    return {
        "method": method,
        "run_name": "walk",
        "model_card": {"license": "mit", "language": ["en"], "tags": ["walk"]},
        "trainer": {
            "save_folder": str(folder / "run"),
            "max_duration": "2steps",
            "hard_stop": "10steps",
            "seed": 1,
            "precision": "fp32",
            "device": "cpu",
            "num_threads": 1,
            "metrics_collect_interval": 1,
            "cancel_check_interval": 1,
            "steps_to_skip": [{"start": 2, "stop": 3}],
            "save_overwrite": True,
            "load_strategy": "if_available",
            "nonfinite_loss": "stop",
        },
        "data": {
            "seq_len": 64,
            "global_batch_size": 4,
            "micro_batch_size": 2,
            "shuffle": True,
            "cache_dir": str(folder / "cache"),
        },
        "model": {
            "config": MODEL,
            "attn_implementation": "sdpa",
            "dtype": "float32",
            "lora": {
                "rank": 4,
                "alpha": 8,
                "dropout": 0.0,
                "bias": "none",
                "target_modules": "all-linear",
                "task_type": "CAUSAL_LM",
                "modules_to_save": ["lm_head"],
            },
        },
        "optim": {
            "lr": 1e-3,
            "weight_decay": 0.01,
            "betas": [0.9, 0.95],
            "eps": 1e-8,
            "grad_clip": 1.0,
            "fused": False,
        },
        "scheduler": {"name": "cosine", "warmup_ratio": 0.5, "min_lr_ratio": 0.1, "decay_fraction": 0.2},
        "callbacks": {
            "checkpointer": {"save_interval": 1, "ephemeral_save_interval": 1, "keep_last": 2, "async_save": False},
            "evaluator": {
                "enabled": True,
                "interval": 1,
                "max_batches": 1,
                "batch_size": 2,
                "metric_for_best_model": "eval/loss",
                "greater_is_better": False,
            },
            "console": {"enabled": True, "log_interval": 1, "plain": True},
            "speed_monitor": {"enabled": True, "peak_flops": 1e12},
            "garbage_collector": {"enabled": True, "interval": 1},
            "sample": {"enabled": True, "prompts": ["the "], "interval": 1, "max_new_tokens": 2, "temperature": 0.5},
            "wandb": {
                "enabled": True,
                "project": "walk",
                "entity": "me",
                "name": "walk-run",
                "tags": ["t"],
                "group": "g",
                "mode": "disabled",
            },
            "tensorboard": {"enabled": True},
            "profiler": {"enabled": True, "start": 1, "stop": 1},
            "upload": {"enabled": True, "save_path": str(folder / "upload")},
            # pushed to a fake Hub (offline_hub below); the watchdog's threshold is never reached
            "hub": {
                "repo_id": "walk/run",
                "strategy": "checkpoint",
                "folder": "hf",
                "private": True,
                "revision": "main",
            },
            "loss_watchdog": {"threshold": 1e9, "patience": 2},
            "custom": [{"import_path": "tests.helpers:CountingCallback", "kwargs": {"label": "walk"}}],
            # lm-eval's text backend does not load image-text-to-text models (refused for vl_sft)
            **({} if method == "vl_sft" else {"harness_eval": harness_eval(folder)}),
        },
        "parallel": {
            "strategy": "none",
            "reshard_after_forward": True,
            "activation_checkpointing": "every_n",
            "activation_checkpointing_every": 1,
            "compile": False,
            "mixed_precision": "none",
            "timeout_seconds": 60,
        },
        "storage": {
            "work_folder": str(folder / "work"),
            "retry_initial_seconds": 0.1,
            "retry_max_seconds": 1.0,
            "upload_wait_seconds": 30,
        },
    }


def second_run(raw: dict[str, Any], first: Path, folder: Path) -> dict[str, Any]:
    """The other side of every either-or: the first run's export by name, validation split off the training
    data, full fine-tuning with frozen layers and a parameter group, warmup in steps, W&B named by run_name."""
    raw = copy.deepcopy(raw)
    raw["trainer"]["save_folder"] = str(folder / "run")
    raw["callbacks"]["upload"]["save_path"] = str(folder / "upload")
    raw["storage"]["work_folder"] = str(folder / "work")
    raw["model"] = {
        "name_or_path": str(first / "run" / "hf"),
        "trust_remote_code": False,
        "freeze_layers": ["*layers.0.self_attn.q_proj*"],
    }
    raw["tokenizer"] = {"kind": "auto", "trust_remote_code": False}
    raw["optim"]["param_groups"] = [{"params": "*embed_tokens*", "lr": 1e-4, "weight_decay": 0.0}]
    raw["scheduler"] = {"name": "wsd", "warmup_steps": 1}
    raw["data"].pop("validation")
    raw["data"]["validation_split"] = 0.25
    del raw["callbacks"]["wandb"]["name"]
    return raw


def pretrain(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Character tokenizer trained here, LoRA, validation sources; then the second run."""
    corpus, held_out = tmp_path / "corpus.txt", tmp_path / "held_out.jsonl"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    held_out.write_text('{"body": "a lazy dog sleeps while the quick fox runs."}\n' * 40)
    raw = shared(tmp_path / "a", "pretrain")
    source = {"weight": 1.0, "text_field": "text", "max_samples": 1000}
    raw["data"]["train"] = {"sources": [{"path": str(corpus), "format": "text", **source}]}
    raw["data"]["validation"] = {
        "sources": [{"path": str(held_out), "format": "jsonl", **source, "text_field": "body"}]
    }
    raw["data"]["validation_split"] = 0.0
    raw["data"]["text_document_separator"] = ". "  # each sentence of corpus.txt is a document
    raw["tokenizer"] = {"kind": "char", "vocab_size": 300, "trust_remote_code": False}
    yield raw
    yield second_run(raw, tmp_path / "a", tmp_path / "b")


def sft(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Byte-level tokenizer, chat template, packing, LoRA, generation eval; then padded rows, some over-long."""
    raw = shared(tmp_path / "a", "sft")
    source = {"format": "conversation", "weight": 1.0, "text_field": "text", "max_samples": 64}
    raw["data"].update(
        train={"sources": [{"path": "generated:reverse?samples=64&seed=0", **source}]},
        validation={  # two sources: each one's own eval/<name>/* (a name, and a path's default)
            "sources": [
                {"path": "generated:reverse?samples=8&seed=1", **source, "name": "held_out"},
                {"path": "generated:reverse?samples=4&seed=2", **source},
            ]
        },
        validation_split=0.0,
        seq_len=128,
        chat_template="chatml",
        train_on="assistant",
        packing=True,
        group_by_length=True,
        overlong="truncate",
        bad_rows="skip",
    )
    raw["tokenizer"] = {"kind": "byte", "trust_remote_code": False}
    raw["sft"] = {"neftune_noise_alpha": 5.0}  # NEFTune on packed rows: each document's own length
    raw["callbacks"]["generation_eval"] = {
        "enabled": True,
        "num_prompts": 2,
        "max_new_tokens": 2,
        "interval": 1,
        "metrics": GENERATION_METRICS,
    }
    yield raw
    second = second_run(raw, tmp_path / "a", tmp_path / "b")
    second["data"].update(packing=False, seq_len=56, overlong="drop", bad_rows="fail")  # some rows are over-long
    yield second


def grpo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Plain prompts with reward columns, held-out conversations for the generation eval, LoRA (the reference:
    adapters off), two passes per rollout; then generated conversations as prompts, full fine-tuning with a
    frozen reference copy."""
    raw = shared(tmp_path / "a", "grpo")
    # no validation loss: the held-out prompts are sampled and scored by the rewards
    raw["callbacks"]["evaluator"].update(metric_for_best_model="eval/reward", greater_is_better=True)
    source = {"format": "conversation", "weight": 1.0, "text_field": "text", "max_samples": 16}
    raw["data"].update(train={"sources": [{"path": "generated:reverse", **source}]}, chat_template="chatml")
    raw["tokenizer"] = {"kind": "byte", "trust_remote_code": False}
    raw["grpo"] = {
        "num_generations": 2,
        "max_completion_length": 4,
        "temperature": 0.9,
        "top_p": 0.95,
        "top_k": 20,
        "beta": 0.04,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "loss_type": "grpo",
        "scale_rewards": "batch",
        "num_iterations": 2,
        "rewards": [{"name": "soft_10tokens_completions", "weight": 1.0}, {"name": "countdown", "weight": 0.5}],
        "sample_interval": 1,
        "validation": {"num_generations": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "before_training": True},
        "use_vllm": True,  # honing's own decoder samples here (one info line)
    }
    prompts, held_out = tmp_path / "prompts.jsonl", tmp_path / "held_out.jsonl"
    prompts.write_text('{"prompt": "3 5 7 make 8: ", "nums": [3, 5, 7], "target": 8}\n' * 8)
    turns = '[{"role": "user", "content": "2 4 make 6: "}, {"role": "assistant", "content": "2+4"}]'
    held_out.write_text(f'{{"messages": {turns}, "nums": [2, 4], "target": 6}}\n' * 4)  # answers and countdown's
    raw["data"]["train"]["sources"][0].update(path=str(prompts), format="prompt")
    raw["data"]["validation"] = {"sources": [{"path": str(held_out), **source, "name": "held_out"}]}
    raw["callbacks"]["generation_eval"] = {
        "enabled": True,
        "num_prompts": 2,
        "max_new_tokens": 2,
        "interval": 1,
        "metrics": GENERATION_METRICS,
    }
    yield raw
    second = second_run({**raw, "data": {**raw["data"], "validation": None}}, tmp_path / "a", tmp_path / "b")
    second["data"].pop("validation_split")  # second_run's validation split off the training data: refused here
    second["data"]["train"]["sources"][0].update(path="generated:reverse?samples=16&seed=0", format="auto")
    second["grpo"].update(loss_type="dapo", scale_rewards="group", rewards=[{"name": "sharp_5tokens_completions"}])
    second["grpo"].update(
        importance_sampling_level="sequence_token", filter_groups={"enable": True, "max_num_gen_batches": 2}
    )
    yield second
    # multi-turn tool use: conversations with the calculator (the generation eval answers in one turn: refused)
    tools = copy.deepcopy(second)
    tools["trainer"]["save_folder"] = str(tmp_path / "c" / "run")
    tools["callbacks"]["upload"]["save_path"] = str(tmp_path / "c" / "upload")
    tools["storage"]["work_folder"] = str(tmp_path / "c" / "work")
    tools["data"]["seq_len"] = 600  # the tools' schemas are shown with every prompt
    tools["callbacks"]["generation_eval"] = {"enabled": False}
    tools["grpo"].update(
        tools=["calculator"], max_turns=2, tool_timeout=5.0, max_tool_response_length=100, tool_call_format="hermes"
    )
    yield tools


def rloo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """GRPO's two runs as RLOO: its section instead of GRPO's (no loss_type, scale_rewards or importance sampling
    level), with normalised advantages and clipped rewards."""
    for raw in grpo(tmp_path):
        section = {
            k: v for k, v in raw["grpo"].items() if k not in ("loss_type", "scale_rewards", "importance_sampling_level")
        }
        section.update(normalize_advantages=True, reward_clip_range=[-1.0, 1.0])
        yield {**{k: v for k, v in raw.items() if k != "grpo"}, "method": "rloo", "rloo": section}


def ppo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """GRPO's first run as PPO (LoRA, reward functions, whitened rewards, k3, the missing-EOS penalty); then the full
    fine-tune of its export scored by a reward model made from that export, which also starts the value model."""
    from transformers import AutoModelForSequenceClassification

    raw = next(grpo(tmp_path))
    section = {k: raw["grpo"][k] for k in ("temperature", "sample_interval", "validation")}
    section.update(
        response_length=4, stop_token="eos", missing_eos_penalty=1.0, kl_coef=0.04, kl_estimator="k3",
        whiten_rewards=True, gamma=0.99, lam=0.9, cliprange=0.2, cliprange_value=0.3, vf_coef=0.2,
        num_ppo_epochs=2, num_mini_batches=1,
        rewards=[{"name": "soft_10tokens_completions", "weight": 1.0}, {"name": "countdown", "weight": 0.5}],
    )  # fmt: skip
    first = {**{k: v for k, v in raw.items() if k != "grpo"}, "method": "ppo", "ppo": section}
    yield first
    reward_model = tmp_path / "reward_model"
    AutoModelForSequenceClassification.from_pretrained(tmp_path / "a" / "run" / "hf", num_labels=1).save_pretrained(
        reward_model
    )
    second = second_run({**first, "data": {**first["data"], "validation": None}}, tmp_path / "a", tmp_path / "b")
    second["data"].pop("validation_split")
    second["data"]["train"]["sources"][0].update(path="generated:reverse?samples=16&seed=0", format="auto")
    second["ppo"] = {**section, "stop_token": None, "stop_token_id": 0, "reward_weights": [0.5]}
    second["ppo"]["rewards"] = [{"name": "soft_10tokens_completions"}]  # beside the reward model's score
    second["ppo"].update(reward_model_path=str(reward_model), value_model_path=str(reward_model))
    yield second


def dpo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Generated preference pairs, LoRA with the adapters-off reference, the robust loss with RPO, generation eval;
    then a full fine-tune of the first run's export with a precomputed reference and over-long pairs dropped."""
    raw = shared(tmp_path / "a", "dpo")
    source = {"format": "preference", "weight": 1.0, "text_field": "text", "max_samples": 32}
    raw["data"].update(
        train={"sources": [{"path": "generated:addition_preference?samples=32&seed=0", **source}]},
        validation={
            "sources": [
                {"path": "generated:addition_preference?samples=8&seed=1", **source, "name": "held_out"},
                {"path": "generated:addition_preference?samples=4&seed=2", **source},
            ]
        },
        validation_split=0.0,
        chat_template="chatml",
        group_by_length=True,
        overlong="truncate",
        bad_rows="skip",
    )
    raw["tokenizer"] = {"kind": "byte", "trust_remote_code": False}
    raw["callbacks"]["generation_eval"] = {
        "enabled": True,
        "num_prompts": 2,
        "max_new_tokens": 2,
        "interval": 1,
        "metrics": GENERATION_METRICS,
    }
    raw["dpo"] = {"loss_type": "robust", "beta": 0.2, "label_smoothing": 0.1, "reference": "adapters_off"}
    raw["dpo"]["rpo_alpha"] = 0.5
    yield raw
    second = second_run(raw, tmp_path / "a", tmp_path / "b")
    second["data"].update(seq_len=38, overlong="drop", bad_rows="fail")  # some pairs are over-long
    second["dpo"] = {"loss_type": "sigmoid", "label_smoothing": 0.0, "reference": "precompute"}
    yield second


def reference_free(method: str, first: dict[str, Any], second: dict[str, Any]) -> Callable[[Path], Iterator[dict]]:
    """DPO's two runs with ``method`` and its section instead of DPO's (the same pairs, rows and callbacks)."""

    def runs(tmp_path: Path) -> Iterator[dict[str, Any]]:
        for raw, section in zip(dpo(tmp_path), (first, second)):
            raw = {key: value for key, value in raw.items() if key != "dpo"}
            yield {**raw, "method": method, method: section}

    return runs


ORPO_RUNS = ({"beta": 0.2, "packed_pairs": True}, {"packed_pairs": False})
CPO_RUNS = (
    {"loss_type": "simpo", "beta": 2.0, "label_smoothing": 0.1, "cpo_alpha": 0.0, "simpo_gamma": 0.5, "alpha": 0.2},
    {"loss_type": "sigmoid", "packed_pairs": False},
)


KTO_RUNS = (
    {"beta": 0.2, "desirable_weight": 1.2, "undesirable_weight": 0.8, "reference": "adapters_off"},
    {"loss_type": "apo_zero_unpaired", "reference": "precompute", "packed_pairs": False},
)  # packed_pairs: true first
REWARD_RUNS = ({"center_rewards_coefficient": 0.01, "packed_pairs": True}, {"packed_pairs": False})
TEXT_CALLBACKS = ("generation_eval", "sample", "harness_eval")  # a reward model generates no text


def reward(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """DPO's two runs as a reward model: its section instead of DPO's, no callback that generates text, LoRA's
    sequence-classification task (the score head saved whole)."""
    for raw, section in zip(dpo(tmp_path), REWARD_RUNS):
        raw = {key: value for key, value in raw.items() if key != "dpo"}
        raw["callbacks"] = {key: value for key, value in raw["callbacks"].items() if key not in TEXT_CALLBACKS}
        if "lora" in raw["model"]:
            raw["model"]["lora"].update(task_type="SEQ_CLS", modules_to_save=["score"])
        yield {**raw, "method": "reward", "reward": section}


def distill(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """SFT's two runs, padded, as distillation: a frozen copy of the student with seq_kd; then the first run's
    export as the teacher, loaded with its own keyword arguments."""
    sections = (
        {"lmbda": 0.5, "beta": 0.2, "temperature": 0.7, "max_new_tokens": 3, "seq_kd": True},
        {"teacher_model_name_or_path": str(tmp_path / "a" / "run" / "hf"), "lmbda": 1.0, "top_p": 0.9, "top_k": 5},
    )
    for raw, section in zip(sft(tmp_path), sections):
        raw["data"].pop("packing", None)
        raw.pop("sft", None)  # NEFTune is SFT's own; distillation refuses its section
        if "teacher_model_name_or_path" in section:
            section["teacher_model_init_kwargs"] = {"dtype": "float32", "attn_implementation": "sdpa"}
        yield {**raw, "method": "distill", "distill": section}


#: method → its runs, each config built after the previous run (the second loads the first's export)
def vl_sft(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A tiny Qwen2-VL on generated OCR images: LoRA, frozen tower and projector, packing, pixel limits,
    generation eval; then full fine-tuning of its export with the tower at its own learning rate, padded rows."""
    raw = shared(tmp_path / "a", "vl_sft")
    source = {"format": "conversation", "weight": 1.0, "text_field": "text", "max_samples": 16}
    raw["data"].update(
        train={"sources": [{"path": "generated:ocr?samples=16&seed=0", **source}]},
        validation={
            "sources": [
                {"path": "generated:ocr?samples=4&seed=1", **source, "name": "held_out"},
                {"path": "generated:ocr?samples=2&seed=2", **source},
            ]
        },
        validation_split=0.0,
        seq_len=128,
        train_on="assistant",
        packing=True,
        group_by_length=True,
        overlong="truncate",
        bad_rows="skip",
        min_pixels=784,
        max_pixels=3136,
        pdf_longest_side=140,
    )
    raw["model"]["config"] = {"model_type": "qwen2_vl"}
    raw["model"].update(freeze_vision=True, freeze_projector=True)
    raw["model"]["lora"]["modules_to_save"] = None
    raw["tokenizer"] = {"kind": "auto", "trust_remote_code": False}
    raw["callbacks"]["generation_eval"] = {
        "enabled": True,
        "num_prompts": 2,
        "max_new_tokens": 2,
        "interval": 1,
        "metrics": GENERATION_METRICS,
    }
    yield raw
    second = second_run(raw, tmp_path / "a", tmp_path / "b")
    second["model"].update(lora=None, freeze_vision=False, freeze_projector=False)
    second["model"]["freeze_layers"] = ["*language_model.layers.0.self_attn.q_proj*"]
    second["optim"].update(vision_lr=1e-4, param_groups=[{"params": "*lm_head*", "lr": 1e-4, "weight_decay": 0.0}])
    second["data"].update(packing=False, seq_len=102, overlong="drop", bad_rows="fail")  # some over-long
    # every augmentation, the size kept (so the same rows are over-long)
    second["data"]["image_transforms"] = {
        "probability": 1.0, "geometric_probability": 0.5, "rotation_degrees": 2.0, "scale": [0.95, 1.05],
        "translate": 0.02, "brightness": 0.2, "contrast": 0.2, "jpeg_quality": [50, 90], "seed": 1,
        "resample": "bicubic",
    }  # fmt: skip
    yield second
    yield from olmocr_runs(raw, tmp_path)


def olmocr_runs(raw: dict[str, Any], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """VL-SFT on olmOCR's two data layouts (text-layer PDFs made here): PDF + front-matter markdown folders with every
    option of ``data.pdf_pages`` set, then batch responses whose prompts and images come from their requests."""
    from tests.interop.configs.olmocr_data import batch_folder, pages_folder

    requests = tmp_path / "requests.jsonl"  # a request no response answers: the responses build their own prompts
    pixel = (
        "data:image/png;base64,"
        + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC"
    )
    content = [{"type": "text", "text": "Read it."}, {"type": "image_url", "image_url": {"url": pixel}}]
    request = {"custom_id": "elsewhere.pdf-1", "body": {"messages": [{"role": "user", "content": content}]}}
    requests.write_text(json.dumps(request) + "\n")
    for name, format, folder, options in (
        (
            "c",
            "olmocr_pages",
            pages_folder(tmp_path / "pages", pages=4),
            {
                "anchor_text_len": 200,
                "prompt": "plain",
                "prompt_text": "Read the page. {anchor_text}",
                "prompt_first": True,
                "reply": "json",
                "skip_rotated": False,  # read for every page either way; true would leave out the turned ones
                "text_rules": True,
                "latex_bold_italic": True,
                "latex_brackets": True,
                "tables": "annotate_dims",
                "rotation_probability": 0.5,
                "token_flip_rate": 0.1,
            },
        ),
        (
            "d",
            "olmocr_batch",
            batch_folder(tmp_path / "batch", pages=4) / "done",
            {"queries": [str(requests)]},
        ),
    ):
        run = copy.deepcopy(raw)
        run["trainer"]["save_folder"] = str(tmp_path / name / "run")
        run["callbacks"]["upload"]["save_path"] = str(tmp_path / name / "upload")
        run["storage"]["work_folder"] = str(tmp_path / name / "work")
        run["callbacks"]["generation_eval"] = {"enabled": False}
        source = {"path": str(folder), "format": format}
        run["data"].update(
            train={"sources": [source]}, packing=False, pdf_pages=options, seq_len=512, overlong="truncate"
        )
        run["data"].pop("validation")
        if format == "olmocr_pages":  # a source's own options (all but the run-wide flip rate), in both splits
            own = {key: value for key, value in options.items() if key != "token_flip_rate"} | {"queries": []}
            run["data"]["train"]["sources"].append({**source, "pdf_pages": own})
            run["data"]["validation"] = {"sources": [{**source, "max_samples": 2, "pdf_pages": own}]}
        yield run


def vl_grpo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """GRPO's two runs on image prompts (generated OCR images) through a tiny Qwen2-VL's processor: LoRA with the tower
    and projector frozen, pixel limits; then full fine-tuning of its export with the tower at its own learning rate."""
    source = {"format": "conversation", "weight": 1.0, "text_field": "text", "max_samples": 8}
    for index, raw in enumerate(grpo(tmp_path)):
        if raw["grpo"].get("tools"):
            continue  # tool turns carry no pixel inputs: refused for vl_grpo
        raw["method"] = "vl_grpo"
        raw["data"].pop("chat_template", None)  # the processor's own template places the images
        raw["data"].update(seq_len=160, min_pixels=784, max_pixels=3136, pdf_longest_side=140)
        raw["grpo"]["rewards"] = [{"name": "soft_10tokens_completions"}, {"name": "exact_answer", "weight": 0.5}]
        raw["callbacks"].pop("harness_eval", None)
        if index == 0:
            raw["data"]["train"] = {"sources": [{"path": "generated:ocr?samples=8&seed=0", **source}]}
            held_out = {"path": "generated:ocr?samples=4&seed=1", **source, "name": "held_out"}
            raw["data"]["validation"] = {"sources": [held_out]}
            raw["model"]["config"] = {"model_type": "qwen2_vl"}
            raw["model"].update(freeze_vision=True, freeze_projector=True)
            raw["model"]["lora"]["modules_to_save"] = None
            raw["tokenizer"] = {"kind": "auto", "trust_remote_code": False}
        else:
            raw["model"].update(lora=None, freeze_vision=False, freeze_projector=False)
            raw["optim"]["vision_lr"] = 1e-4
        yield raw


def vl_dpo(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """DPO's two runs on image pairs (coloured squares made here) through a tiny Qwen2-VL's processor: LoRA with the
    tower and projector frozen, pixel limits; then full fine-tuning of its export with the tower at its own rate."""
    from tests.recipes.test_vl_dpo import colour_pairs

    (tmp_path / "pairs").mkdir()
    pairs = colour_pairs(tmp_path / "pairs", "oumi")
    pairs.write_text(pairs.read_text() * 2)  # 8 pairs: a global batch after the held-out part and the over-long
    for index, raw in enumerate(dpo(tmp_path)):
        raw["method"] = "vl_dpo"
        raw["data"].pop("chat_template", None)  # the processor's own template places the images
        raw["data"].update(seq_len=96, min_pixels=784, max_pixels=3136, pdf_longest_side=140)
        for split in ("train", "validation"):
            for source in raw["data"].get(split, {}).get("sources", []):
                source.update(path=str(pairs), format="preference_prompt", max_samples=8)
        raw["callbacks"].pop("harness_eval", None)
        if index == 0:
            raw["model"]["config"] = {"model_type": "qwen2_vl"}
            raw["model"].update(freeze_vision=True, freeze_projector=True)
            raw["model"]["lora"]["modules_to_save"] = None
            raw["tokenizer"] = {"kind": "auto", "trust_remote_code": False}
        else:
            raw["model"].update(lora=None, freeze_vision=False, freeze_projector=False)
            raw["optim"]["vision_lr"] = 1e-4
            raw["data"].update(seq_len=92, overlong="drop")  # one pair (93 tokens) is over-long
            raw["dpo"].update(reference="copy", packed_pairs=False)  # image pairs: no precompute, padded rows
        yield raw


SCENARIOS: dict[str, Callable[[Path], Iterator[dict[str, Any]]]] = {
    "pretrain": pretrain,
    "sft": sft,
    "vl_sft": vl_sft,
    "grpo": grpo,
    "rloo": rloo,
    "online_dpo": online_dpo_runs(grpo),
    "ppo": ppo,
    "vl_grpo": vl_grpo,
    "vl_dpo": vl_dpo,
    "dpo": dpo,
    "orpo": reference_free("orpo", *ORPO_RUNS),
    "cpo": reference_free("cpo", *CPO_RUNS),
    "kto": reference_free("kto", *KTO_RUNS),  # DPO's runs: the pairs turned unpaired
    "reward": reward,
    "distill": distill,
}


def run_and_record(raw: dict[str, Any]) -> set[str]:
    """The key paths one recipe run reads."""
    from honing.recipes import recipe_class

    config = validate(with_mixtures(raw))
    with track_reads(config) as reads:
        recipe_class(config.method)(config).run()
    return reads.keys


def with_mixtures(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with each split of raw sources drawn by a mixture that takes every row once (the sources in turn),
    so that every method reads ``data.<split>.mixture``'s keys; prepared token folders are read whole."""
    raw = copy.deepcopy(raw)
    for split in ("train", "validation"):
        part = (raw.get("data") or {}).get(split)
        if not isinstance(part, dict) or "mixture" in part:
            continue
        if any(source.get("format") == "tokens" or source.get("weight", 1.0) != 1.0 for source in part["sources"]):
            continue
        part["mixture"] = {"stop": "all_exhausted_without_replacement", "seed": 0, "max_repetition": 1.0}
    return raw


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_key_is_read_or_refused(tmp_path, method):
    assert method in SCENARIOS, f"method {method!r} has no scenario in tests/config/test_schema_walk.py: add one"
    reads: set[str] = set()
    for raw in SCENARIOS[method](tmp_path):
        reads |= run_and_record(raw)
    unread = []
    for key in leaf_keys(RunConfig):
        if key in reads:
            continue
        refused = refused_key(method, key)
        if refused is None:
            unread.append(key)
        else:
            assert_refused(method, key, refused, tmp_path)
    assert not unread, (
        f"method {method!r}: these keys are neither read by its recipe nor refused by "
        f"honing.config.methods:\n  " + "\n  ".join(unread)
    )


def assert_refused(method: str, key: str, refused: str, tmp_path: Path) -> None:
    """Setting ``key`` (to its default, which still counts as given) fails with one line naming ``refused``."""
    raw = minimal(method, tmp_path)
    if key.startswith("data.validation."):  # a source needs its path to be one
        raw["data"]["validation"] = {"sources": [{"path": "held_out.jsonl"}]}
    for section in ("grpo", "rloo", "online_dpo", "ppo"):
        if key.startswith(f"{section}.rewards[]."):  # a reward needs its name to be one
            raw[section] = {"rewards": [{"name": "countdown"}]}
    set_key(raw, key, sample_value(key))
    with pytest.raises(ConfigError) as info:
        validate(raw)
    message = str(info.value)
    shown = refused.replace("[]", "[0]")
    assert message.startswith(f"config: {shown}: not used by method '{method}'"), message
    assert "\n" not in message and message.count("not used by method") == 1, message


def minimal(method: str, tmp_path: Path) -> dict[str, Any]:
    """The smallest valid config of ``method``."""
    return {
        "method": method,
        "data": {"train": {"sources": [{"path": str(tmp_path / "data.jsonl")}]}},
        "model": {"config": dict(MODEL)},
    }


def set_key(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted key path in a raw config, ``[]`` meaning the first item (created if missing)."""
    parts = key.split(".")
    node: Any = raw
    for part in parts[:-1]:
        name, is_list = part.removesuffix("[]"), part.endswith("[]")
        node = node.setdefault(name, [{}] if is_list else {})
        if is_list:
            node = node[0]
    node[parts[-1]] = value


def field_info(key: str) -> Any:
    model: type[BaseModel] = RunConfig
    parts = key.replace("[]", "").split(".")
    for part in parts[:-1]:
        model = section_type(model.model_fields[part].annotation)[0]
    return model.model_fields[parts[-1]]


#: values for required keys (no default) that some method refuses
REQUIRED_SAMPLES = {
    "data.validation.sources[].path": "held_out.jsonl",
    "grpo.rewards[].name": "countdown",
    "rloo.rewards[].name": "countdown",
    "online_dpo.rewards[].name": "countdown",
    "ppo.rewards[].name": "countdown",
}


def sample_value(key: str) -> Any:
    """A valid value for ``key``: its default (a key set to its default is still a key the user set)."""
    if key in REQUIRED_SAMPLES:
        return REQUIRED_SAMPLES[key]
    info = field_info(key)
    if info.default_factory is not None:
        return info.default_factory()
    assert info.default is not PydanticUndefined, f"{key} has no default: give test_schema_walk a sample value for it"
    return info.default


@pytest.mark.parametrize("method", sorted(METHODS))
def test_values_a_method_cannot_read_are_refused(tmp_path, method):
    for key, allowed in METHODS[method].values.items():
        for value in typing.get_args(field_info(key).annotation):
            raw = minimal(method, tmp_path)
            if key.startswith("data.validation."):
                raw["data"]["validation"] = {"sources": [{"path": "held_out.jsonl"}]}
            set_key(raw, key, value)
            if value in allowed:
                try:
                    validate(raw)
                except ConfigError as error:  # e.g. tokenizer.kind 'pretrained' without a path: not a refusal
                    assert "not used by method" not in str(error)
                continue
            with pytest.raises(ConfigError) as info:
                validate(raw)
            message = str(info.value)
            expected = f"config: {key.replace('[]', '[0]')}: {value!r} not used by method '{method}'; expected one of"
            assert message.startswith(expected) and "\n" not in message, message
