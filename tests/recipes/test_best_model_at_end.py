"""``callbacks.evaluator.load_best_model_at_end: true``: ``hf/`` is the best checkpoint's model (olmOCR / Hugging
Face), not the last step's."""

from __future__ import annotations

import pytest
import torch
import yaml
from safetensors.torch import load_file

from honing.config import validate
from honing.recipes import recipe_for
from honing.run import checkpoint_model
from honing.run.checkpoint_model import export_checkpoint
from tests.distributed.runs import CONFIG


def run(tmp_path, **evaluator):
    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / "run", steps=4, save_interval=100, custom="[]"))
    raw["data"]["validation_split"] = 0.1
    raw["trainer"]["device"] = "cpu"
    raw["callbacks"]["sample"] = {"enabled": False}
    raw["callbacks"]["evaluator"] = {"enabled": True, "interval": 1, "max_batches": 2, **evaluator}
    recipe = recipe_for(validate(raw))
    recipe.run()
    return tmp_path / "run", recipe


def checkpoint_weights(folder, tmp_path, step):
    """A checkpoint's model as ``honing export`` writes it (a separate model built from the checkpoint)."""
    export_checkpoint(str(folder / f"step{step}"), str(tmp_path / f"export{step}"))
    return load_file(tmp_path / f"export{step}" / "model.safetensors")


def live_weights(recipe):
    """The run's own model after the run, keyed as on disk."""
    return {key: value.detach() for key, value in recipe.model.state_dict().items()}


def same(left, right):
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def test_hf_is_the_best_checkpoints_model_not_the_last_steps(tmp_path):
    # the highest validation loss is the best here, so the best step is the first and the last is not the best
    folder, recipe = run(
        tmp_path, metric_for_best_model="eval/loss", greater_is_better=True, load_best_model_at_end=True
    )
    hf, best = load_file(folder / "hf" / "model.safetensors"), load_file(folder / "best" / "model.safetensors")
    assert hf.keys() == best.keys() and all(torch.equal(hf[k], best[k]) for k in hf)
    export_checkpoint(str(folder / "step4"), str(tmp_path / "last"))
    last = load_file(tmp_path / "last" / "model.safetensors")
    assert not all(torch.equal(hf[k], last[k]) for k in hf)
    assert (folder / "hf" / "config.json").exists()
    # the best weights were loaded into the run's model and streamed out: the same as a model built from step 1's
    # checkpoint, and the run ends on them (Hugging Face's load_best_model_at_end)
    assert same(best, checkpoint_weights(folder, tmp_path, 1))
    live = live_weights(recipe)
    assert all(torch.equal(live[k], best[k]) for k in best)


def test_without_it_hf_is_the_last_step(tmp_path, monkeypatch):
    # the run never builds a second model to export best/ (export_checkpoint is that path)
    monkeypatch.setattr(checkpoint_model, "export_checkpoint", lambda *a: pytest.fail("built a second model"))
    folder, recipe = run(tmp_path, metric_for_best_model="eval/loss", greater_is_better=True)
    hf = load_file(folder / "hf" / "model.safetensors")
    last = checkpoint_weights(folder, tmp_path, 4)
    assert same(hf, last)
    # best/ is step 1's model, exported through the run's own model, whose final weights were then loaded back
    best = load_file(folder / "best" / "model.safetensors")
    assert same(best, checkpoint_weights(folder, tmp_path, 1)) and not same(best, last)
    live = live_weights(recipe)
    assert all(torch.equal(live[k], last[k]) for k in last)
