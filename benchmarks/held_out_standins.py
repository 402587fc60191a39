"""Local stand-ins for what a translated config names and this machine cannot have (issue 43, item 5): a tiny random
model of the named model's family for a hub name or a missing folder, a few dozen generated rows in the columns the
source's reader expects for a hub data set or a missing file, and caps on the sizes that make 3 CPU steps
impossible. Everything else in the config is left as translated. Used by ``held_out_training.py``."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/interop/configs/olmocr_data.py builds olmOCR's PDF folders

ROWS = 48  # 3 steps of a batch capped at 8 rows fit in half an epoch (fractional epochs)
SEQ_CAP, BATCH_CAP = 512, 8
# rows with an image keep the config's own resolution: an olmOCR page at 1288 px is ~1060 image tokens
VL_SEQ_CAP = 2048
# name pattern (lowercase) -> (model_type, vision-language); the first match wins, so VL names come first
FAMILIES: tuple[tuple[str, str, bool], ...] = (
    (r"qwen3[._-]?vl|chandra", "qwen3_vl", True),
    (r"qwen2[._]5[._-]?vl|olmocr-2|olmocr-7b-0825|typhoon-ocr|nanonets-ocr", "qwen2_5_vl", True),
    (r"qwen2[._-]?vl|olmocr", "qwen2_vl", True),
    (r"molmo", "molmo2", True),
    (r"llava", "llava", True),
    (r"smolvlm|idefics3", "idefics3", True),
    (r"qwen3.*-a\d+b|qwen3[._-]?moe", "qwen3_moe", False),
    (r"qwen3", "qwen3", False),
    (r"qwen", "qwen2", False),
    (r"smollm|llama|tinyllama|deepseek-r1-distill-llama", "llama", False),
    (r"mistral|mixtral|zephyr", "mistral", False),
    (r"gemma-?3", "gemma3_text", False),
    (r"gemma", "gemma", False),
    (r"phi-?3|phi-?4", "phi3", False),
)
# a mixture of experts kept tiny: transformers' defaults are 128 experts of 768 (19M parameters at hidden 32)
EXTRA_SHAPE = {"qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}}
UNKNOWN = ("llama", False)  # counted apart: the named family has no row above
PAIR_METHODS = ("dpo", "orpo", "simpo", "cpo", "ipo", "kto", "reward")
PROMPT_METHODS = ("grpo", "rloo", "ppo", "online_dpo", "gkd")


def family(name: str, vision: bool = False) -> tuple[str, bool, bool]:
    """(model_type, vision-language, known) for a model name: the first pattern it matches; a tiny llama (or, for
    a vision method, a tiny Qwen2-VL) marked unknown otherwise."""
    lowered = name.lower()
    for pattern, model_type, is_vl in FAMILIES:
        if re.search(pattern, lowered) and (is_vl or not vision):
            return model_type, is_vl, True
    return ("qwen2_vl", True, False) if vision else (*UNKNOWN, False)


def cap_sizes(config: dict[str, Any], seq_cap: int = SEQ_CAP) -> list[str]:
    """Cap ``data.seq_len`` at ``seq_cap`` and the batch sizes at 8 rows in place; one note per cap."""
    notes = []
    data = config.setdefault("data", {})
    micro = data.get("micro_batch_size")
    micro = min(micro, BATCH_CAP) if isinstance(micro, int) else 1
    # the batch stays a multiple of the micro batch (honing requires it): 48 rows of micro 6 -> 6, not 8
    batch_cap = BATCH_CAP // micro * micro
    for key, cap in (("seq_len", seq_cap), ("batch_size_per_rank", batch_cap), ("micro_batch_size", BATCH_CAP)):
        if isinstance(data.get(key), int) and data[key] > cap:
            notes.append(f"data.{key} {data[key]}->{cap}")
            data[key] = cap
    return notes


def tiny_model(model_type: str, is_vl: bool, folder: Path) -> str:
    """A tiny random model of ``model_type`` with a tokenizer that fits, saved to ``folder`` once; its path."""
    if (folder / "config.json").is_file():
        return str(folder)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    torch.manual_seed(0)
    if is_vl:
        from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config

        build_tiny_processor(model_type, str(folder))
        AutoModelForImageTextToText.from_config(tiny_vl_config(model_type)).save_pretrained(folder)
        return str(folder)
    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    tokenizer.save_pretrained(folder)
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                 intermediate_size=64, vocab_size=len(tokenizer), max_position_embeddings=SEQ_CAP,
                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    shape |= EXTRA_SHAPE.get(model_type, {})
    AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **shape)).save_pretrained(folder)
    return str(folder)


def _chats(count: int = ROWS) -> list[dict]:
    from honing.data.generated.tasks import generate_rows

    return generate_rows("reverse", samples=count, seed=0)


def named_rows(name: str) -> list[dict] | None:
    """Rows in a named data set's own (hub) columns, or None for one this table lacks."""
    numbers = [(3 + i % 7, 2 + i % 5) for i in range(ROWS)]
    chats = _chats()
    makers = {
        "countdown": lambda a, b, c: {"target": a + b, "nums": [a, b]},
        "gsm8k": lambda a, b, c: {"question": f"What is {a} plus {b}?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"},
        "math": lambda a, b, c: {"problem": f"What is {a} plus {b}?", "solution": f"It is \\boxed{{{a + b}}}."},
        "letter_count": lambda a, b, c: {
            "messages": [{"role": "user", "content": f"How many r's are in {'r' * a + 'x' * b}?"}],
            "metadata": {"letter_count_integer": a},
        },
        "alpaca": lambda a, b, c: {
            "instruction": c["messages"][0]["content"],
            "input": "",
            "output": c["messages"][1]["content"],
        },
        "ultrachat": lambda a, b, c: {"prompt_id": str(a), "messages": c["messages"]},
        "tldr": lambda a, b, c: {"prompt": c["messages"][0]["content"], "completion": c["messages"][1]["content"]},
    }
    make = makers.get(name)
    return None if make is None else [make(a, b, chat) for (a, b), chat in zip(numbers, chats)]


def method_rows(kind: str, text_field: str = "text") -> list[dict]:
    """Rows in the format a method reads: conversations, preference pairs, prompts with an answer, or text."""
    chats = _chats()
    if kind == "pairs":
        return [{"messages": [c["messages"][0]], "chosen": {"messages": [c["messages"][1]]},
                 "rejected": {"messages": [{"role": "assistant", "content": "no"}]}} for c in chats]  # fmt: skip
    if kind == "prompts":
        return [{"prompt": [c["messages"][0]], "answer": c["messages"][1]["content"]} for c in chats]
    if kind == "text":
        return [{text_field: c["messages"][1]["content"] * 20} for c in chats]
    if kind == "prompt_completion":
        return [{"prompt": c["messages"][0]["content"], "completion": c["messages"][1]["content"]} for c in chats]
    if kind == "alpaca":
        return [{"instruction": c["messages"][0]["content"], "input": "", "output": c["messages"][1]["content"]}
                for c in chats]  # fmt: skip
    return chats


def rows_kind(method: str, source: dict[str, Any]) -> str:
    """What a source of ``method`` holds: images, pairs, prompts, text, prompt_completion, alpaca or chats."""
    fmt = source.get("format", "auto")
    if method.startswith("vl") or fmt == "mllm":
        return "images"
    if fmt.startswith("preference") or any(part in method for part in PAIR_METHODS):
        return "pairs"
    if fmt == "prompt" or any(part in method for part in PROMPT_METHODS):
        return "prompts"
    if method in ("pretrain", "cpt") or fmt in ("text", "jsonl"):
        return "text"
    if fmt in ("prompt_completion", "alpaca"):  # rows in the format the source names (its columns map them)
        return fmt
    return "chats"


def _write(path: Path, rows: list[dict], columns: dict[str, str]) -> str:
    # the rows in the source's own columns: honing's name -> the row's column, as the source maps them
    renamed = [{columns.get(key, key): value for key, value in row.items()} for row in rows]
    path.write_text("".join(json.dumps(row) + "\n" for row in renamed))
    return str(path)


def stand_in_source(source: dict[str, Any], method: str, folder: Path) -> str | None:
    """Point ``source`` (in place) at generated local rows when its path is not here; a note, or None if kept."""
    from honing.data.named.registry import hub_dataset, named_dataset

    path = str(source.get("path", ""))
    if path and not path.startswith("generated:") and os.path.exists(path):
        return None
    if path.startswith("generated:"):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    fmt = source.get("format", "auto")
    if fmt in ("olmocr_pages", "olmocr_batch"):
        from tests.interop.configs.olmocr_data import batch_folder, pages_folder

        made = (pages_folder if fmt == "olmocr_pages" else batch_folder)(folder / "pages", pages=ROWS)
        source["path"] = str(made)
        return f"{fmt} folder"
    entry = None
    try:
        entry = named_dataset(source["dataset"]) if source.get("dataset") else hub_dataset(path)
    except Exception:  # an unknown name: the reader would refuse it; stand in by the method's rows
        entry = None
    rows = named_rows(entry.name) if entry is not None else None
    source.pop("subset", None)  # a hub configuration; the local file has none
    if rows is not None:
        source["dataset"] = entry.name
        source.pop("columns", None)
        source["path"] = _write(folder / f"{entry.name}.jsonl", rows, {})
        return f"named {entry.name} rows"
    kind = rows_kind(method, source)
    if entry is not None:
        kind = {"image conversations": "images", "preference pairs": "pairs", "prompts": "prompts"}.get(
            entry.gives, "chats"
        )
        source.pop("dataset", None)
    if kind == "images":
        from honing.data.generated.tasks import materialize

        source["path"] = materialize(f"generated:ocr?samples={ROWS}&seed=0", str(folder / "cache"))
        source.pop("columns", None)
        return "image conversations"
    source["path"] = _write(folder / f"{kind}.jsonl", method_rows(kind, source.get("text_field", "text")),
                            source.get("columns", {}))  # fmt: skip
    return f"{kind} rows"


def stand_in(config: dict[str, Any], work: Path, models: Path) -> tuple[dict[str, Any], list[str], str]:
    """The config with stand-ins for what is not here and its sizes capped, the notes, and the model's family
    verdict (``kept`` | ``MODEL_TYPE`` | ``unknown->llama``)."""
    config = copy.deepcopy(config)
    method = str(config.get("method", "sft"))
    notes = cap_sizes(config, VL_SEQ_CAP if method.startswith("vl") else SEQ_CAP)
    model = config.setdefault("model", {})
    name = str(model.get("name_or_path") or "")
    kept = "kept"
    if not name or not os.path.exists(name):
        model_type, is_vl, known = family(name, vision=method.startswith("vl"))
        model["name_or_path"] = tiny_model(model_type, is_vl, models / model_type)
        kept = model_type if known else f"unknown->{model_type}"
        notes.append(f"model {name or '(none)'} -> tiny {model_type}")
    data = config.setdefault("data", {})
    for split in ("train", "validation"):
        for index, source in enumerate((data.get(split) or {}).get("sources") or []):
            note = stand_in_source(source, method, work / f"{split}{index}")
            if note:
                notes.append(f"{split}[{index}]: {note}")
    cache = data.get("cache_dir")
    if cache and not os.path.isabs(str(cache)):  # a config's own relative cache (olmOCR's cache_location) stays in work
        data["cache_dir"] = str(work / str(cache))
        notes.append(f"data.cache_dir {cache} -> under the run's temporary folder")
    trainer = config.setdefault("trainer", {})
    trainer["hard_stop"] = "3steps"
    trainer["save_folder"] = str(work / "run")
    callbacks = config.setdefault("callbacks", {})
    for name in ("evaluator", "sample"):
        callbacks.setdefault(name, {})["enabled"] = False
    for name in ("wandb", "tensorboard", "generation_eval"):
        if name in callbacks:
            callbacks[name]["enabled"] = False
    callbacks.pop("hub", None)
    callbacks.pop("upload", None)
    return config, notes, kept
