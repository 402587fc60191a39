"""``callbacks.evaluator.load_best_model_at_end: true``: ``hf/`` is the best checkpoint's model (olmOCR / Hugging
Face), not the last step's."""

from __future__ import annotations

import torch
import yaml
from safetensors.torch import load_file

from honing.config import validate
from honing.recipes import recipe_for
from honing.run.checkpoint_model import export_checkpoint
from tests.distributed.runs import CONFIG


def run(tmp_path, **evaluator):
    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / "run", steps=4, save_interval=100, custom="[]"))
    raw["data"]["validation_split"] = 0.1
    raw["trainer"]["device"] = "cpu"
    raw["callbacks"]["sample"] = {"enabled": False}
    raw["callbacks"]["evaluator"] = {"enabled": True, "interval": 1, "max_batches": 2, **evaluator}
    recipe_for(validate(raw)).run()
    return tmp_path / "run"


def test_hf_is_the_best_checkpoints_model_not_the_last_steps(tmp_path):
    # the highest validation loss is the best here, so the best step is the first and the last is not the best
    folder = run(tmp_path, metric_for_best_model="eval/loss", greater_is_better=True, load_best_model_at_end=True)
    hf, best = load_file(folder / "hf" / "model.safetensors"), load_file(folder / "best" / "model.safetensors")
    assert hf.keys() == best.keys() and all(torch.equal(hf[k], best[k]) for k in hf)
    export_checkpoint(str(folder / "step4"), str(tmp_path / "last"))
    last = load_file(tmp_path / "last" / "model.safetensors")
    assert not all(torch.equal(hf[k], last[k]) for k in hf)
    assert (folder / "hf" / "config.json").exists()


def test_without_it_hf_is_the_last_step(tmp_path):
    folder = run(tmp_path, metric_for_best_model="eval/loss", greater_is_better=True)
    hf = load_file(folder / "hf" / "model.safetensors")
    export_checkpoint(str(folder / "step4"), str(tmp_path / "last"))
    last = load_file(tmp_path / "last" / "model.safetensors")
    assert all(torch.equal(hf[k], last[k]) for k in hf)
