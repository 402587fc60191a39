"""Oumi's vision-language DPO recipes (``trainer_type: TRL_DPO`` on image data) translate to ``method: vl_dpo``, and
Qwen2-VL's trains 3 steps as published, with stand-ins for what cannot be here: a tiny Qwen2-VL for the hub model and
a local Parquet file in RLAIF-V's format (an Image column, ``question`` / ``chosen`` / ``rejected``) for the hub data
set. Skipped without ``../shared/foreign-configs``."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import yaml

from honing.config import validate
from honing.interop.configs import load_any_config, translate
from honing.recipes import recipe_for
from tests.interop.configs.olmocr_data import tiny_qwen2_vl

VISION = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs" / "oumi" / "recipes" / "vision"
RECIPES = ("qwen2_vl_2b", "qwen2_5_vl_3b", "llava_7b", "phi3")
pytestmark = pytest.mark.skipif(not VISION.is_dir(), reason=f"{VISION} is absent (Oumi's published configs)")
# what a CPU test machine stands in for (honing's keys, applied after the translation)
STAND_INS = ["trainer.max_duration=3steps", "trainer.num_threads=1", "callbacks.tensorboard.enabled=false"]


@pytest.mark.parametrize("name", RECIPES)
def test_oumis_vision_dpo_recipes_translate_to_vl_dpo(name):
    translation = translate(yaml.safe_load((VISION / name / "dpo" / "train.yaml").read_text()))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.method == "vl_dpo"
    if name.startswith("qwen"):
        assert config.dpo.beta == 0.1 and config.data.seq_len == 2048
        assert config.data.train.sources[0].path == "openbmb/RLAIF-V-Dataset:train"
        assert config.data.train.sources[0].max_samples == 1000
    if name == "qwen2_5_vl_3b":  # Oumi processes its rows with Qwen2-VL-2B's processor, as the file says
        assert config.tokenizer.path == "Qwen/Qwen2-VL-2B-Instruct"
    if name == "llava_7b":  # Oumi trains what freeze_layers does not name
        assert config.model.freeze_layers == ["vision_tower"] and config.model.freeze_vision is False
    if name == "phi3":
        assert config.model.lora is not None and config.model.lora.rank == 16


def rlaif_v_parquet(path: Path, rows: int = 16) -> Path:
    """RLAIF-V's columns as the hub's Parquet holds them: ``image`` a struct of PNG bytes and path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    colours = {"red": (255, 0, 0), "green": (0, 160, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0)}
    names, table = list(colours), []
    for index in range(rows):
        name = names[index % len(names)]
        buffer = io.BytesIO()
        Image.new("RGB", (56 + 28 * (index % 2), 56), colours[name]).save(buffer, format="PNG")
        table.append(
            {
                "ds_name": "colours",
                "image": {"bytes": buffer.getvalue(), "path": f"{index}.png"},
                "question": "What colour is the picture?",
                "chosen": f"It is {name}.",
                "rejected": f"It is {names[(index + 1) % len(names)]}.",
                "origin_dataset": "test",
                "origin_split": json.dumps({"split": "train"}),
                "idx": index,
                "image_path": f"{index}.png",
            }
        )
    pq.write_table(pa.Table.from_pylist(table), path)
    return path


def test_qwen2_vl_vision_dpo_recipe_trains_three_steps(tmp_path):
    raw = yaml.safe_load((VISION / "qwen2_vl_2b" / "dpo" / "train.yaml").read_text())
    model = tiny_qwen2_vl(tmp_path / "tiny-qwen2-vl")
    raw["model"]["model_name"] = model
    dataset = raw["data"]["train"]["datasets"][0]
    dataset["dataset_path"] = str(rlaif_v_parquet(tmp_path / "rlaif-v.parquet"))
    dataset["dataset_kwargs"]["processor_name"] = model
    raw["training"]["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_any_config(str(path), [*STAND_INS, f"data.cache_dir={tmp_path / 'cache'}"])
    assert config.method == "vl_dpo" and config.data.batch_size_per_rank == 16  # 2 per device x 8 accumulation
    recipe_for(config).run()
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5)  # policy = reference (a frozen copy) at step 1
