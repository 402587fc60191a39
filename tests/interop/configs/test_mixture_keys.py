"""Oumi's and LLaMA-Factory's dataset mixtures translate to honing's ``data.<split>.mixture``: the stopping
strategy, each source's proportion and the seed, and the translated mixture draws the rows their
``datasets.interleave_datasets`` call draws; what cannot be mixed is refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import Dataset, interleave_datasets

from honing.config import validate
from honing.data.mixture import mixture_indices
from honing.interop.configs import translate

OUMI = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
    "training": {"trainer_type": "TRL_SFT"},
}
ITEMS = [{"dataset_name": "text_sft_jsonl", "dataset_path": "a.jsonl"},
         {"dataset_name": "text_sft_jsonl", "dataset_path": "b.jsonl"}]  # fmt: skip


def oumi(split: dict) -> dict:
    return {**OUMI, "data": {"train": split}}


def test_oumi_proportions_strategy_and_seed_become_the_mixture_and_draw_oumis_rows():
    datasets = [{**ITEMS[0], "mixture_proportion": 0.3}, {**ITEMS[1], "mixture_proportion": 0.7}]
    translation = translate(oumi({"datasets": datasets, "mixture_strategy": "all_exhausted", "seed": 11}))
    assert translation.refused == []
    train = translation.config["data"]["train"]
    assert train["mixture"] == {"stop": "all_exhausted", "seed": 11}
    assert [source["proportion"] for source in train["sources"]] == [0.3, 0.7]
    config = validate(translation.config)
    # Oumi's _mix_datasets: interleave_datasets(datasets, probabilities, seed, stopping_strategy)
    parts = [Dataset.from_dict({"row": list(range(9))}), Dataset.from_dict({"row": list(range(9, 30))})]
    oumis = interleave_datasets(parts, probabilities=[0.3, 0.7], seed=11, stopping_strategy="all_exhausted")["row"]
    mixture = config.data.train.mixture
    proportions = [source.proportion for source in config.data.train.sources]
    assert mixture_indices([9, 21], proportions, stop=mixture.stop, seed=mixture.seed) == oumis


@pytest.mark.parametrize(
    ("split", "refused"),
    [
        ({"datasets": [{**ITEMS[0], "mixture_proportion": 0.5}, ITEMS[1]]}, "datasets[0].mixture_proportion: given"),
        (
            {
                "datasets": [{**ITEMS[0], "mixture_proportion": 0.5}, {**ITEMS[1], "mixture_proportion": 0.5}],
                "mixture_strategy": "round_robin",
            },
            "mixture_strategy: 'round_robin': expected one of first_exhausted, all_exhausted",
        ),  # fmt: skip
    ],
)
def test_an_oumi_mixture_honing_cannot_draw_is_refused_in_one_line(split, refused):
    translation = translate(oumi(split))
    assert len(translation.refused) == 1 and f"data.train.{refused}" in translation.refused[0]


def llamafactory(tmp_path, **keys) -> dict:
    (tmp_path / "a.jsonl").write_text(json.dumps({"instruction": "hi", "output": "yo"}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"instruction": "ho", "output": "ya"}) + "\n")
    info = {name: {"file_name": f"{name}.jsonl"} for name in ("a", "b")}
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    raw = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "stage": "sft", "do_train": True, "finetuning_type": "full",
           "dataset": "a,b", "dataset_dir": str(tmp_path), "template": "qwen", **keys}  # fmt: skip
    return raw


@pytest.mark.parametrize(
    ("strategy", "stop"),
    [("interleave_under", "first_exhausted"), ("interleave_over", "all_exhausted"),
     ("interleave_once", "all_exhausted_without_replacement")],
)  # fmt: skip
def test_llamafactory_mix_strategy_and_probabilities_become_the_mixture(tmp_path, strategy, stop):
    translation = translate(llamafactory(tmp_path, mix_strategy=strategy, interleave_probs="0.25,0.75"))
    assert translation.refused == []
    train = translation.config["data"]["train"]
    assert train["mixture"] == {"stop": stop}
    assert [source["proportion"] for source in train["sources"]] == [0.25, 0.75]
    config = validate(translation.config)
    assert config.trainer.seed == 42  # LLaMA-Factory's merge_dataset seeds the interleave with the training seed
    # the rows LLaMA-Factory's interleave_datasets call takes, for sources of 5 and 12 rows
    parts = [Dataset.from_dict({"row": list(range(5))}), Dataset.from_dict({"row": list(range(5, 17))})]
    theirs = interleave_datasets(parts, probabilities=[0.25, 0.75], seed=42, stopping_strategy=stop)["row"]
    assert mixture_indices([5, 12], [0.25, 0.75], stop=stop, seed=config.trainer.seed) == theirs


def test_llamafactory_without_probabilities_takes_turns_and_concat_keeps_none(tmp_path):
    turns = translate(llamafactory(tmp_path, mix_strategy="interleave_over")).config["data"]["train"]
    assert turns["mixture"] == {"stop": "all_exhausted"} and all("proportion" not in s for s in turns["sources"])
    assert np.array_equal(mixture_indices([2, 3], None, stop="all_exhausted"), [0, 2, 1, 3, 0, 4])
    concat = translate(llamafactory(tmp_path, interleave_probs="0.5,0.5"))
    assert "mixture" not in concat.config["data"]["train"]
    assert any(note.startswith("interleave_probs: unused with mix_strategy concat") for note in concat.notes)


@pytest.mark.parametrize(
    ("keys", "refused"),
    [
        ({"mix_strategy": "interleave_under", "interleave_probs": "0.5"}, "interleave_probs: 1 probabilities for 2"),
        ({"mix_strategy": "interleave_under", "interleave_probs": "a,b"}, "interleave_probs: 'a,b': expected numbers"),
        ({"mix_strategy": "shuffle"}, "mix_strategy: 'shuffle': expected concat or one of"),
    ],
)
def test_a_llamafactory_mixture_honing_cannot_draw_is_refused_in_one_line(tmp_path, keys, refused):
    translation = translate(llamafactory(tmp_path, **keys))
    assert len(translation.refused) == 1 and translation.refused[0].startswith(refused), translation.refused
