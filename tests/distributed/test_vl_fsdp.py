"""LoRA vision-language SFT under FSDP2 (``honing train --nproc 2`` on gloo): the tiny Qwen2-VL trains like one
process on the same global batches (per-step losses and final weights within 1e-5), with its vision blocks sharded
as FSDP2 units of their own."""

from __future__ import annotations

import json
import random

import pytest
import torch

from honing.distributed import is_rank0
from honing.models.parallel import find_blocks
from honing.train import Callback
from tests.distributed.runs import failure_excerpt, honing_train, metrics, weights

pytestmark = pytest.mark.slow

STEPS = 10
VISION_BLOCKS = "model.visual.blocks"
LANGUAGE_BLOCKS = "model.language_model.layers"

# LoRA dropout off and no dropout in the model: runs that see the same global batches compute the same losses.
CONFIG = """
method: vl_sft
trainer: {{save_folder: {save_folder}, max_duration: {steps}steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: {data}}}]}}
  seq_len: 128
  global_batch_size: 4
  micro_batch_size: 2
  cache_dir: {cache}
model:
  config: {{model_type: qwen2_vl}}
  lora: {{rank: 4, alpha: 8, dropout: 0.0}}
optim: {{lr: 1.0e-2}}
scheduler: {{name: constant, warmup_steps: 0}}
callbacks:
  checkpointer: {{save_interval: 5, keep_last: 1}}
  evaluator: {{enabled: false}}
  sample: {{enabled: false}}
  speed_monitor: {{enabled: false}}
  console: {{plain: true}}
  custom:
    - {{import_path: "tests.distributed.callbacks:DumpWeights", kwargs: {{folder: "{dumps}", steps: [{steps}]}}}}
    - {{import_path: "tests.distributed.test_vl_fsdp:RecordFSDPUnits", kwargs: {{path: "{units}"}}}}
"""


class RecordFSDPUnits(Callback):
    """Writes, on rank 0 when training begins, the names of the modules that are FSDP2 units and the names of the
    block lists ``find_blocks`` finds."""

    def __init__(self, path: str):
        self.path = path

    def on_train_begin(self) -> None:
        from torch.distributed.fsdp import FSDPModule

        model = self.trainer.train_module.model
        names = {id(module): name for name, module in model.named_modules()}
        units = [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]
        blocks = [names[id(module_list)] for module_list in find_blocks(model)]
        if is_rank0():
            with open(self.path, "w") as file:
                json.dump({"units": units, "blocks": blocks}, file)


def write_data(folder) -> str:
    """16 rows: an image of a random 4-digit string and its transcription (as in the mini-OCR example)."""
    from PIL import Image, ImageDraw

    rng = random.Random(0)
    rows = []
    for index in range(16):
        text = "".join(rng.choice("0123456789") for _ in range(4))
        image = Image.new("RGB", (84, 28), "white")
        ImageDraw.Draw(image).text((4, 8), text, fill="black")
        image.save(folder / f"img{index}.png")
        user = [{"type": "image_path", "content": f"img{index}.png"}, {"type": "text", "content": "Transcribe."}]
        rows.append({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": text}]})
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def vl_run(folder, name, data, nproc=None):
    save_folder = folder / name
    config = folder / f"{name}.yaml"
    units = folder / f"{name}-units.json"
    config.write_text(
        CONFIG.format(
            save_folder=save_folder,
            steps=STEPS,
            data=data,
            cache=folder / "cache",
            dumps=folder / f"{name}-weights",
            units=units,
        )
    )
    overrides = ["parallel.strategy=fsdp"] if nproc else []
    result = honing_train(str(config), *overrides, nproc=nproc, timeout=420)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return {
        "metrics": metrics(save_folder),
        "weights": weights(folder / f"{name}-weights" / f"step{STEPS}.pt"),
        "units": json.loads(units.read_text()),
        "result": result,
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vl_fsdp")
    data = write_data(folder)
    return vl_run(folder, "single", data), vl_run(folder, "fsdp", data, nproc=2)


def test_find_blocks_finds_the_vision_blocks_also_inside_peft():
    from transformers import AutoModelForImageTextToText

    from honing.models import apply_lora
    from honing.models.tiny_vl import tiny_vl_config
    from honing.models.vl_families import FAMILIES, lora_targets

    model = AutoModelForImageTextToText.from_config(tiny_vl_config("qwen2_vl"))
    expected = {model.get_submodule(VISION_BLOCKS), model.get_submodule(LANGUAGE_BLOCKS)}
    assert {id(blocks) for blocks in find_blocks(model)} == {id(blocks) for blocks in expected}
    adapted = apply_lora(model, rank=4, alpha=8, target_modules=lora_targets(FAMILIES["qwen2_vl"]))
    assert {id(blocks) for blocks in find_blocks(adapted)} == {id(blocks) for blocks in expected}


def test_lora_vl_sft_two_processes_match_one(runs):
    single, sharded = runs
    assert "joined process group: rank 0 of 2" in sharded["result"].stderr
    one, two = single["metrics"], sharded["metrics"]
    assert sorted(two) == sorted(one) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert two[step]["train/loss"] == pytest.approx(one[step]["train/loss"], abs=1e-5), step
        assert two[step]["optim/grad_norm"] == pytest.approx(one[step]["optim/grad_norm"], abs=1e-5), step
        assert two[step]["train/target_tokens"] == one[step]["train/target_tokens"], step
    assert one[STEPS]["train/loss"] < one[1]["train/loss"]  # the adapters did train
    left, right = single["weights"], sharded["weights"]
    assert sorted(left) == sorted(right)
    assert any("lora_B" in name for name in left)
    for name in left:  # gathered to full shapes, the same numbers as one process
        torch.testing.assert_close(right[name], left[name], atol=1e-5, rtol=0, msg=name)
    trained = [name for name in left if "lora_B" in name and left[name].abs().sum() > 0]
    assert trained, "no LoRA weight moved from its zero init"


def test_vision_blocks_are_fsdp2_units(runs):
    _, sharded = runs
    units, blocks = sharded["units"]["units"], sharded["units"]["blocks"]
    # inside peft the transformers names gain a "base_model.model." prefix
    assert any(name.endswith(VISION_BLOCKS) for name in blocks), blocks
    assert any(name.endswith(LANGUAGE_BLOCKS) for name in blocks), blocks
    vision_units = sorted(name for name in units if VISION_BLOCKS + "." in name)
    assert [name.rsplit(".", 1)[-1] for name in vision_units] == ["0", "1"], units  # the tiny tower's 2 blocks
    assert sum(LANGUAGE_BLOCKS + "." in name for name in units) == 2, units
    assert "base_model.model" in units, units  # the transformers model inside peft is the root unit
