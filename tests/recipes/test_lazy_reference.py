"""``dpo.reference: lazy``: each pair scored by the reference the first time a batch holds it and cached per row —
the same losses as the reference precomputed before training, no reference forward in later epochs or runs."""

from __future__ import annotations

import json

import pytest

from honing.config import validate
from honing.methods.pairs import PairTrainModule
from honing.methods.reference_cache import ReferenceCache
from honing.recipes.dpo import DPORecipe
from tests.recipes.pair_runs import pair_run


def losses(folder):
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    train = [row["train/loss"] for row in rows if "train/loss" in row]
    return train, [row["eval/loss"] for row in rows if "eval/loss" in row]


def config(tmp_path, name, reference, *, lora=True, steps=2, **sections):
    raw = pair_run(tmp_path, "dpo", name, steps=steps, validation_samples=8, dpo={"reference": reference}, **sections)
    if not lora:
        raw["model"] = {key: value for key, value in raw["model"].items() if key != "lora"}
    return validate(raw)


@pytest.mark.parametrize("lora", [True, False], ids=["lora-adapters-off", "full-frozen-copy"])
def test_lazy_gives_the_losses_of_the_precomputed_reference(tmp_path, lora):
    DPORecipe(config(tmp_path, "precompute", "precompute", lora=lora, steps=4)).run()
    DPORecipe(config(tmp_path, "lazy", "lazy", lora=lora, steps=4)).run()
    precomputed, lazy = losses(tmp_path / "precompute"), losses(tmp_path / "lazy")
    assert len(precomputed[0]) == 4 and len(precomputed[1]) >= 2
    assert lazy == precomputed  # bit for bit: train and eval losses


def test_later_epochs_and_runs_read_the_cache(tmp_path, monkeypatch):
    scored = []
    score = PairTrainModule.score_reference
    monkeypatch.setattr(PairTrainModule, "score_reference", lambda self, micro: scored.append(1) or score(self, micro))
    quiet = {
        "callbacks": {"evaluator": {"enabled": False}, "sample": {"enabled": False}, "console": {"enabled": False}}
    }
    # 32 pairs, 4 a step in micro-batches of 2: one epoch is 8 steps, 16 micro-batches
    DPORecipe(config(tmp_path, "first", "lazy", steps=16, data={"validation": None}, **quiet)).run()
    assert len(scored) == 16  # the first epoch only
    scored.clear()
    again = config(
        tmp_path, "again", "lazy", steps=16, data={"validation": None}, **quiet, trainer={"hard_stop": "4steps"}
    )
    DPORecipe(again).run()
    assert scored == []  # every row read from the disk cache
    assert losses(tmp_path / "again")[0] == losses(tmp_path / "first")[0][:4]
    files = list((tmp_path / "cache" / "dpo_reference").glob("lazy-*/rows-0.bin"))
    assert len(files) == 1
    # each distinct row written once (32 bytes: its key, chosen and rejected log-probs), the repeats of epoch 2 never
    assert files[0].stat().st_size == 32 * len(ReferenceCache(str(files[0].parent))) > 0
