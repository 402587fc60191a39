"""olmOCR's published configs, one of each generation, train on olmOCR's own data layouts made in the test (one-page
PDFs with a text layer): the file as published, with stand-ins for what cannot be here (a tiny Qwen2-VL for the hub
model, local folders for theirs, no W&B, sdpa and no compile on a CPU, 3 steps at a learning rate that moves a
random tiny model). The loss falls; under 2 processes the per-device batch keys give each process its own rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from honing.distributed import get_rank
from honing.interop.configs import load_any_config
from honing.recipes import recipe_for
from honing.train import Callback
from tests.distributed.runs import failure_excerpt, honing_train
from tests.interop.configs.olmocr_data import batch_folder, pages_folder, tiny_qwen2_vl

FOREIGN = Path(__file__).resolve().parents[3].parent / "shared" / "foreign-configs" / "olmocr"
CURRENT = FOREIGN / "current" / "v0.4.0" / "qwen25_vl_olmocrv4_finetuning.yaml"
TRAINCONFIG = FOREIGN / "trainconfig-2025" / "qwen2vl-7b-lora.yaml"
pytestmark = [
    pytest.mark.skipif(not FOREIGN.is_dir(), reason=f"{FOREIGN} is absent (olmOCR's published configs)"),
    pytest.mark.slow,
]
# what a CPU test machine stands in for (honing's keys, applied after the translation)
STAND_INS = [
    "trainer.max_duration=3steps",
    "trainer.num_threads=1",
    "model.attn_implementation=sdpa",
    "parallel.compile=false",
    "callbacks.wandb.enabled=false",
    "callbacks.sample.enabled=false",
    "optim.lr=1e-2",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_qwen2_vl(tmp_path_factory.mktemp("olmocr") / "tiny-qwen2-vl")


def current_config(tmp_path: Path, model: str, pages: int, **training) -> Path:
    """olmOCR's v0.4 fine-tuning config with the model, its data folders and output folder as stand-ins."""
    raw = yaml.safe_load(CURRENT.read_text())
    raw["model"]["name"] = model
    raw["dataset"]["train"][0]["root_dir"] = str(pages_folder(tmp_path / "train", pages))
    raw["dataset"]["eval"][0]["root_dir"] = str(pages_folder(tmp_path / "eval", 4))
    raw["training"].update(output_dir=str(tmp_path / "out"), **training)
    path = tmp_path / CURRENT.name
    path.write_text(yaml.safe_dump(raw))
    return path


def trained_losses(config_path: Path, tmp_path: Path) -> list[float]:
    """Train ``config_path`` (olmOCR's file) with the stand-ins; the per-step training losses."""
    folder = [f"data.cache_dir={tmp_path / 'cache'}", f"trainer.save_folder={tmp_path / 'run'}"]
    config = load_any_config(str(config_path), [*STAND_INS, *folder])
    recipe_for(config).run()
    metrics = Path(config.trainer.save_folder) / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def test_the_current_generation_trains_on_a_pdf_and_front_matter_folder(tmp_path, model):
    path = current_config(tmp_path, model, pages=32)  # its batch: 1 per device x 32 accumulation steps
    config = load_any_config(str(path), STAND_INS)
    assert config.data.pdf_pages.rotation_probability == 0.02 and config.data.pdf_longest_side == 1288
    losses = trained_losses(path, tmp_path)
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_the_trainconfig_generation_trains_on_batch_responses_and_their_pdfs(tmp_path, model):
    raw = yaml.safe_load(TRAINCONFIG.read_text())
    raw["model"]["name_or_path"] = model
    for split, pages in (("train_data", 8), ("valid_data", 2)):
        raw[split]["cache_location"] = str(tmp_path / "pdf-cache")
        for index, source in enumerate(raw[split]["sources"]):
            folder = batch_folder(tmp_path / f"{split}{index}", pages=pages, unfinished=1)
            source["response_glob_path"] = str(folder / "done" / "*.json")
    raw["save"]["path"] = str(tmp_path / "uploads")
    path = tmp_path / TRAINCONFIG.name
    path.write_text(yaml.safe_dump(raw))
    config = load_any_config(str(path), STAND_INS)
    assert (config.data.pdf_pages.anchor_text_len, config.data.pdf_pages.prompt) == (6000, "plain")
    losses = trained_losses(path, tmp_path)
    assert len(losses) == 3 and losses[-1] < losses[0]


class RecordBatch(Callback):
    """Writes, per rank when training begins, the rows of a step over all ranks and this rank's share."""

    def __init__(self, folder: str):
        self.folder = folder

    def on_train_begin(self) -> None:
        loader = self.trainer.data_loader
        Path(self.folder, f"rank{get_rank()}.json").write_text(
            json.dumps({"global": loader.global_batch_size, "local": loader.local_batch_size})
        )


def test_per_device_batch_keys_keep_their_meaning_under_two_processes(tmp_path, model):
    # 2 rows per device and step (1 x 2 accumulation steps): 4 rows per step on 2 processes, 2 on each
    path = current_config(tmp_path, model, pages=8, gradient_accumulation_steps=2)
    custom = json.dumps([{"import_path": f"{__name__}:RecordBatch", "kwargs": {"folder": str(tmp_path)}}])
    overrides = [*STAND_INS, "trainer.max_duration=1steps", f"data.cache_dir={tmp_path / 'cache'}"]
    result = honing_train(str(path), *overrides, f"callbacks.custom={custom}", nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    seen = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert seen == [{"global": 4, "local": 2}] * 2
