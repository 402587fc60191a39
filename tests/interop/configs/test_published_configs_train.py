"""Oumi's published recipes (``../shared/foreign-configs/oumi``) train 3 steps as their users have them, with
stand-ins for what cannot be here: each hub model becomes a tiny random model of the same family (a transformers
config of the family's ``model_type``, saved with honing's byte tokenizer beside it) and each hub data set a few local
rows in that data set's own format. Everything else in the file stays as published (LoRA ranks, QLoRA, methods, chat
templates, batch sizes); the few honing keys a CPU test needs are listed with their reason. Skipped without
``../shared/foreign-configs``.

The olmOCR configs trained in ``test_olmocr_training.py`` (VL-SFT, Qwen2-VL) and Oumi's Qwen2-VL DPO recipe in
``test_oumi_vl_dpo.py`` (VL-DPO) complete the set of published configs that train."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from honing.interop.configs.loading import load_any_config
from honing.recipes import recipe_for

RECIPES = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs" / "oumi" / "recipes"
pytestmark = pytest.mark.skipif(not RECIPES.is_dir(), reason=f"{RECIPES} is absent (Oumi's published configs)")
# what a CPU test machine stands in for (honing's keys, applied after the translation)
STAND_INS = [
    "trainer.max_duration=3steps",
    "trainer.num_threads=1",
    "callbacks.tensorboard.enabled=false",
    "callbacks.wandb.enabled=false",  # enable_wandb: no account here
]
# a tiny model of each family: 2 layers, hidden size 32 (gpt2 names them its own way)
TINY = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=512,
)
FAMILY_SHAPES = {
    "llama": TINY,
    "qwen2": TINY,
    "qwen3": {**TINY, "head_dim": 16},
    "gemma2": {**TINY, "head_dim": 16},
    "phi3": TINY,
    "gpt2": dict(n_embd=32, n_layer=2, n_head=2, n_inner=64, n_positions=512),
}


@dataclass(frozen=True)
class Published:
    """One published recipe: its file, the family its model belongs to, its data's format and what a test changes."""

    path: str
    family: str
    data: str  # the key of the local file in the data set's own row format (``data_files``)
    method: str  # honing's method the translation gives
    overrides: list[str] = field(default_factory=list)  # honing keys beyond STAND_INS, each with its reason
    keeps: dict[str, Any] = field(default_factory=dict)  # honing keys the file's own settings must give
    first_loss: float | None = None  # the loss of step 1 where the method fixes it

    def __str__(self) -> str:
        return self.path


# Phi-3 fuses its projections (qkv_proj, gate_up_proj). Two of Oumi's Phi-3 recipes list Llama's names (q_proj,
# k_proj, v_proj, gate_proj, up_proj) beside o_proj and down_proj: peft adapts the names that match and skips the rest
# without a word, so Oumi trains adapters on o_proj and down_proj only. honing refuses a target that matches no
# module; these tests give it the targets peft keeps, which is what the recipe trains under Oumi.
PHI3_PEFT_TARGETS = ["model.lora.target_modules=[o_proj, down_proj]"]

CASES = [
    # SFT, every weight trained
    Published("smollm/sft/135m/quickstart_train.yaml", "llama", "alpaca", "sft"),
    Published("llama3_2/sft/1b_full/train.yaml", "llama", "alpaca", "sft"),
    Published(
        "qwen2_5/sft/3b_full/train.yaml",
        "qwen2",
        "alpaca",
        "sft",
        ["data.num_workers=2"],  # the file: 64 loader processes (a large node's); this test machine has 2 cores
    ),
    Published("qwen3/sft/0.6b_full/train.yaml", "qwen3", "alpaca", "sft"),
    Published(
        "gemma2/sft/2b_full/train.yaml",
        "gemma2",
        "alpaca",
        "sft",
        # the file: sdpa, which transformers 5 refuses for Gemma2ForCausalLM ("does not support ... sdpa yet")
        ["model.attn_implementation=eager"],
    ),
    # LoRA
    Published("llama3_2/sft/3b_lora/train.yaml", "llama", "alpaca", "sft", keeps={"model.lora.rank": 64}),
    Published("phi3/sft/lora_train.yaml", "phi3", "alpaca", "sft", PHI3_PEFT_TARGETS),
    Published("qwen3/sft/14b_lora/train.yaml", "qwen3", "alpaca", "sft", keeps={"model.lora.rank": 16}),
    # QLoRA (nf4)
    Published(
        "llama3_2/sft/3b_qlora/train.yaml",
        "llama",
        "alpaca",
        "sft",
        keeps={"model.quantize": "nf4", "model.lora.rank": 64},
    ),
    Published(
        "qwq/sft/qlora_train.yaml", "qwen2", "alpaca", "sft", keeps={"model.quantize": "nf4", "model.lora.rank": 16}
    ),
    # preference methods (LoRA on Phi-3)
    Published(
        "phi3/dpo/nvidia_80g_train.yaml",
        "phi3",
        "orpo_dpo_mix",
        "dpo",
        keeps={"model.lora.target_modules": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]},
        first_loss=math.log(2),  # LoRA starts as the base: policy = reference at step 1
    ),
    Published("phi3/kto/train.yaml", "phi3", "kto_mix", "kto", PHI3_PEFT_TARGETS),
    # pretraining from random weights (load_pretrained_weights: false) on fineweb-edu's sample-10BT
    Published(
        "gpt2/pretraining/train.yaml",
        "gpt2",
        "fineweb_edu",
        "pretrain",
        # the file: 64 x 8 rows of 1024 tokens a step (an A100's load); two rows of 64 tokens here
        ["data.batch_size_per_rank=2", "data.micro_batch_size=2", "data.seq_len=64"],
        keeps={"model.pretrained_weights": False},
    ),
    Published(
        "llama3_1/pretraining/8b/train.yaml",
        "llama",
        "fineweb_edu",
        "pretrain",
        ["data.seq_len=64"],  # the file: 2048 tokens a row, 16 rows a step; 16 rows of 64 tokens here
        keeps={"model.pretrained_weights": False, "data.batch_size_per_rank": 16},
    ),
    # VL-SFT: LoRA on Qwen3-VL, the vision tower frozen, on llava-instruct-mix-vsft's rows (its first 512)
    Published(
        "vision/qwen3_vl_2b/sft/2b_instruct_lora_train.yaml",
        "qwen3_vl",
        "llava_instruct_mix",
        "vl_sft",
        keeps={"model.freeze_layers": ["model.visual"], "model.lora.rank": 8, "data.batch_size_per_rank": 32},
    ),
]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """``rows`` as a JSON Lines file; its path."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def data_files(root: Path) -> dict[str, str]:
    """A few rows of each hub data set the recipes name, in that data set's own columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    alpaca = [  # yahma/alpaca-cleaned: instruction / input / output
        {"instruction": f"Reverse the word {word}.", "input": "" if i % 2 else word, "output": word[::-1]}
        for i, word in enumerate(words * 4)
    ]
    orpo_dpo_mix = [  # mlabonne/orpo-dpo-mix-40k: whole conversations, chosen and rejected, with their prompt
        {
            "source": "test",
            "prompt": f"Reverse {word}.",
            "chosen": [{"role": "user", "content": f"Reverse {word}."}, {"role": "assistant", "content": word[::-1]}],
            "rejected": [{"role": "user", "content": f"Reverse {word}."}, {"role": "assistant", "content": word}],
            "question": f"Reverse {word}.",
        }
        for word in words * 32  # one step of the recipe: 4 rows a device x 64 accumulation steps
    ]
    kto_mix = [  # trl-lib/kto-mix-14k: conversational prompt and completion, and whether it is desirable
        {
            "prompt": [{"role": "user", "content": f"Reverse {word}."}],
            "completion": [{"role": "assistant", "content": word[::-1] if i % 2 == 0 else word}],
            "label": i % 2 == 0,
        }
        for i, word in enumerate(words * 2)
    ]
    # HuggingFaceH4/llava-instruct-mix-vsft: Hugging Face's multimodal messages, {"type": "image"} items taking the
    # row's images in order (PNG bytes, as the hub's Parquet holds them); one step of the recipe is 32 rows
    llava = []
    for i in range(32):
        buffer = io.BytesIO()
        Image.new("RGB", (56, 56), (255, 0, 0) if i % 2 else (0, 0, 255)).save(buffer, format="PNG")
        llava.append(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "text": None, "index": 0},
                            {"type": "text", "text": "What colour is the picture?", "index": None},
                        ],
                    },
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "red" if i % 2 else "blue", "index": None}],
                    },
                ],
                "images": [{"bytes": buffer.getvalue(), "path": None}],
            }
        )
    (root / "llava-instruct-mix-vsft").mkdir()
    pq.write_table(pa.Table.from_pylist(llava), root / "llava-instruct-mix-vsft" / "train-00000.parquet")
    # HuggingFaceFW/fineweb-edu as its hub repository lays it out: configurations named in the README's front matter
    fineweb = root / "fineweb-edu"
    (fineweb / "sample" / "10BT").mkdir(parents=True)
    (fineweb / "README.md").write_text(
        "---\nconfigs:\n- config_name: sample-10BT\n  data_files:\n  - split: train\n    path: sample/10BT/*\n---\n"
    )
    documents = [{"text": " ".join(words[i:] + words[:i]) * 4, "id": f"doc{i}", "url": "https://example.com"}
                 for i in range(len(words))]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(documents), fineweb / "sample" / "10BT" / "000_00000.parquet")
    return {
        "alpaca": write_jsonl(root / "alpaca-cleaned.jsonl", alpaca),
        "orpo_dpo_mix": write_jsonl(root / "orpo-dpo-mix.jsonl", orpo_dpo_mix),
        "kto_mix": write_jsonl(root / "kto-mix.jsonl", kto_mix),
        "fineweb_edu": str(fineweb),
        "llava_instruct_mix": str(root / "llava-instruct-mix-vsft" / "train-00000.parquet"),
    }


def text_stand_in(folder: Path, family: str) -> str:
    """A tiny random model of ``family`` (its transformers ``model_type``) with honing's byte tokenizer beside it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    tokenizer.save_pretrained(folder)
    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if tokenizer.bos_token_id is not None:
        ids["bos_token_id"] = tokenizer.bos_token_id
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), **FAMILY_SHAPES[family], **ids)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def vl_stand_in(folder: Path, family: str) -> str:
    """A tiny random vision-language model of ``family`` with the family's processor (honing.models.tiny_vl)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config

    path = build_tiny_processor(family, str(folder))
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(tiny_vl_config(family)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """One stand-in model per family and the data files, built once for the module."""
    root = tmp_path_factory.mktemp("published")
    models = {family: text_stand_in(root / f"tiny-{family}", family) for family in FAMILY_SHAPES}
    models["qwen3_vl"] = vl_stand_in(root / "tiny-qwen3-vl", "qwen3_vl")
    return {"models": models, "data": data_files(root)}


def setting(config: Any, key: str) -> Any:
    """The value of a dotted honing key in a validated config."""
    for part in key.split("."):
        config = getattr(config, part)
    return config


def losses(folder: Path) -> list[float]:
    """``train/loss`` of every step in a run's metrics.jsonl."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_published_recipe_trains_three_steps_on_its_familys_stand_in(case, assets, tmp_path):
    raw = yaml.safe_load((RECIPES / case.path).read_text())
    raw["model"]["model_name"] = assets["models"][case.family]
    for dataset in raw["data"]["train"]["datasets"]:
        dataset["dataset_path"] = assets["data"][case.data]  # Oumi reads a hub data set from a local path
        if "processor_name" in dataset.get("dataset_kwargs", {}):
            dataset["dataset_kwargs"]["processor_name"] = raw["model"]["model_name"]
    raw["training"]["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load_any_config(str(path), [*STAND_INS, f"data.cache_dir={tmp_path / 'cache'}", *case.overrides])
    assert config.method == case.method
    for key, value in case.keeps.items():
        assert setting(config, key) == value, key
    recipe_for(config).run()
    trained = losses(tmp_path / "out")
    assert len(trained) == 3 and all(math.isfinite(loss) for loss in trained)
    if case.first_loss is not None:
        assert trained[0] == pytest.approx(case.first_loss, abs=1e-5)


def test_orpo_dpo_mix_rows_give_the_prompt_their_conversations_share(assets):
    """mlabonne/orpo-dpo-mix-40k's rows: a string prompt column, and chosen / rejected as whole conversations; TRL
    (and so Oumi's TRL_DPO) takes the messages they share as the prompt."""
    from honing.data.preference.pairs import detect_preference_format, to_pair

    row = json.loads(Path(assets["data"]["orpo_dpo_mix"]).read_text().splitlines()[0])
    pair = to_pair(row, detect_preference_format(row))
    assert pair.prompt == [{"role": "user", "content": "Reverse alpha."}]
    assert pair.chosen == [{"role": "assistant", "content": "ahpla"}]
    assert pair.rejected == [{"role": "assistant", "content": "alpha"}]
