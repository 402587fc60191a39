"""Oumi's Qwen2-VL SFT recipe names its vision tower as transformers 4 did (``freeze_layers: [visual]``): converted
unchanged, it trains 3 steps on a tiny Qwen2-VL with the tower (transformers 5's ``model.visual``) frozen and the
language model trained. Skipped without ``../shared/foreign-configs``."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from honing.interop.configs import load_any_config
from honing.recipes import recipe_for
from tests.interop.configs.olmocr_data import tiny_qwen2_vl
from tests.interop.configs.test_published_configs_train import STAND_INS as PUBLISHED_STAND_INS

RECIPE = (
    Path(__file__).resolve().parents[3].parent
    / "shared/foreign-configs/oumi/recipes/vision/qwen2_vl_2b/sft/full/train.yaml"
)
pytestmark = pytest.mark.skipif(not RECIPE.is_file(), reason=f"{RECIPE} is absent (Oumi's published configs)")
# what a CPU test machine stands in for (honing's keys, applied after the translation), as for the published recipes
STAND_INS = [
    *PUBLISHED_STAND_INS,
    "data.batch_size_per_rank=2",  # the file: 32 rows a step (1 a device x 32 accumulation); 2 here
]


def llava_instruct_parquet(path: Path, rows: int = 8) -> Path:
    """HuggingFaceH4/llava-instruct-mix-vsft's columns (the recipe's named alternative to vqav2-small): messages whose
    ``{"type": "image"}`` items take the row's images in order, PNG bytes as the hub's Parquet holds them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    table = []
    for index in range(rows):
        buffer = io.BytesIO()
        Image.new("RGB", (56, 56), (255, 0, 0) if index % 2 else (0, 0, 255)).save(buffer, format="PNG")
        question = [{"type": "image", "text": None, "index": 0}, {"type": "text", "text": "Colour?", "index": None}]
        answer = [{"type": "text", "text": "red" if index % 2 else "blue", "index": None}]
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        table.append({"messages": messages, "images": [{"bytes": buffer.getvalue(), "path": None}]})
    pq.write_table(pa.Table.from_pylist(table), path)
    return path


def test_the_qwen2_vl_recipes_visual_is_the_frozen_tower_of_a_three_step_run(tmp_path, caplog):
    from transformers import AutoModelForImageTextToText

    raw = yaml.safe_load(RECIPE.read_text())
    assert raw["model"]["freeze_layers"] == ["visual"]  # transformers 4's name, as published
    model = tiny_qwen2_vl(tmp_path / "tiny-qwen2-vl")
    raw["model"]["model_name"] = model
    dataset = raw["data"]["train"]["datasets"][0]
    dataset["dataset_name"] = "HuggingFaceH4/llava-instruct-mix-vsft"
    dataset["dataset_path"] = str(llava_instruct_parquet(tmp_path / "llava-instruct.parquet"))
    dataset["dataset_kwargs"]["processor_name"] = model
    raw["training"]["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = load_any_config(str(path), [*STAND_INS, f"data.cache_dir={tmp_path / 'cache'}"])
    assert config.method == "vl_sft" and config.model.freeze_layers == ["visual"]
    with caplog.at_level("INFO", logger="honing.models.freeze"):
        recipe_for(config).run()
    assert "'visual' names no module of this model; freezing 'model.visual'" in caplog.text
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    before = AutoModelForImageTextToText.from_pretrained(model).state_dict()
    after = AutoModelForImageTextToText.from_pretrained(tmp_path / "out" / "hf").state_dict()
    # the export holds the file's torch_dtype (bfloat16): the stand-in's float32 weights are compared at it
    changed = {name for name, value in after.items() if not torch.equal(value, before[name].to(value.dtype))}
    assert changed and not any(name.startswith("model.visual.") for name in changed)
    assert any(name.startswith("model.language_model.") for name in changed)
