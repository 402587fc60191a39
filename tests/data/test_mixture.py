"""Sources mixed by proportion (``data.<split>.mixture``): the same rows as ``datasets.interleave_datasets`` for
every stopping strategy and seed, proportions met over many rows, repetition bounded, the mixture reaching an SFT
run's rows and pretraining's documents, and a stopped run resuming to the same weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from datasets import Dataset, interleave_datasets

from honing.config import ConfigError
from honing.config.mixture_schema import MixtureSection
from honing.data.mixture import mixed_picks, mixture_indices, mixture_report
from honing.data.splits import read_splits
from honing.data.text.documents import load_documents
from honing.errors import DataError
from honing.recipes.sft import SFTRecipe
from tests.recipes.test_sft import sft_config

STOPS = ("first_exhausted", "all_exhausted", "all_exhausted_without_replacement")


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("counts", [[3, 4, 5], [10, 2, 1], [40, 7, 19]])
@pytest.mark.parametrize("proportions", [None, [0.2, 0.3, 0.5], [0.7, 0.1, 0.2]])
def test_the_rows_are_those_datasets_interleaves(counts, proportions, stop):
    starts = np.cumsum([0, *counts])
    parts = [Dataset.from_dict({"row": list(range(a, b))}) for a, b in zip(starts[:-1], starts[1:])]
    for seed in (0, 7):
        expected = interleave_datasets(parts, probabilities=proportions, seed=seed, stopping_strategy=stop)["row"]
        assert mixture_indices(counts, proportions, stop=stop, seed=seed) == expected, seed


def test_proportions_are_met_over_many_rows_and_repetition_is_reported():
    counts, proportions = [500, 3000, 100], [0.5, 0.3, 0.2]
    picks = mixture_indices(counts, proportions, rows=20_000, seed=3)
    report = mixture_report(counts, ["a", "b", "c"], picks)
    shares = [part.drawn / len(picks) for part in report]
    assert len(picks) == 20_000
    assert shares == pytest.approx(proportions, abs=0.01)  # binomial std at 20k draws is ~0.0035
    assert report[2].repetition == pytest.approx(40, rel=0.05)  # 0.2 x 20k draws over 100 rows
    # a source that runs out starts again from its first row: every row of the small source drawn ~40 times
    assert np.bincount(np.asarray(picks)[np.asarray(picks) >= 3500] - 3500).min() >= 30


def test_relative_proportions_are_normalised_and_the_seed_decides():
    assert mixture_indices([50, 50], [1, 3], seed=1) == mixture_indices([50, 50], [0.25, 0.75], seed=1)
    assert mixture_indices([50, 50], [1, 3], seed=1) != mixture_indices([50, 50], [1, 3], seed=2)


class Source:
    def __init__(self, path, proportion=None):
        self.path, self.proportion = path, proportion


def test_a_repetition_over_the_bound_names_the_source_and_the_fix():
    mixture = MixtureSection(stop="all_exhausted", max_repetition=2)
    with pytest.raises(DataError, match=r"data.train.sources\[1\] \('small'\).*over data.train.mixture.max_repetition"):
        mixed_picks([1000, 10], [Source("big", 0.5), Source("small", 0.5)], mixture, seed=0, where="data.train")
    assert len(mixed_picks([1000, 10], [Source("big", 0.5), Source("small", 0.5)], MixtureSection(), seed=0, where="x"))


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"sources": [{"path": "a", "proportion": 1}]}, r"sources\[0\].proportion needs the split's mixture"),
        ({"sources": [{"path": "a", "proportion": 1}, {"path": "b"}], "mixture": {}}, r"sources\[1\] has no prop"),
        ({"sources": [{"path": "a", "weight": 2}], "mixture": {}}, r"sources\[0\].weight is 2: in a mixture"),
        ({"sources": [{"path": "a"}], "mixture": {"rows": 5, "stop": "all_exhausted"}}, "rows .* or its stop"),
    ],
)
def test_a_mixture_that_cannot_be_drawn_is_refused_in_one_line(tmp_path, train, message):
    with pytest.raises(ConfigError, match=message):
        sft_config(tmp_path, data={"train": train})


def write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def chats(tag, count):
    return [
        {"messages": [{"role": "user", "content": f"{tag} {i}"}, {"role": "assistant", "content": f"{tag}{i}"}]}
        for i in range(count)
    ]


def mixed_sft(tmp_path, name="run", **trainer):
    train = {
        "sources": [
            {"path": write(tmp_path / "a.jsonl", chats("a", 40)), "proportion": 3},
            {"path": write(tmp_path / "b.jsonl", chats("b", 12)), "proportion": 1},
        ],
        "mixture": {"stop": "all_exhausted", "seed": 5},
    }
    data = {"train": train, "cache_dir": str(tmp_path / "cache")}
    return sft_config(tmp_path / name, trainer=trainer, data=data)


def test_an_sft_split_uses_the_mixtures_rows(tmp_path):
    recipe = SFTRecipe(mixed_sft(tmp_path))
    data = recipe.config.data
    kind = recipe.row_kind(recipe.model_assets())
    table, picks = read_splits(kind, data, seed=0, cache_dir=str(tmp_path / "cache"))["train"]
    assert picks == mixture_indices([40, 12], [3, 1], stop="all_exhausted", seed=5)
    origins = [table.row(i)["origin"] for i in picks]
    assert {origin.split(":")[0].rsplit("/", 1)[1] for origin in origins} == {"a.jsonl", "b.jsonl"}
    assert len(picks) > 52  # all_exhausted: b's 12 rows run out first and start again until a's 40 are drawn


def test_pretraining_documents_are_drawn_by_the_mixture(tmp_path):
    paths = [
        write(tmp_path / f"{tag}.jsonl", [{"text": f"{tag}{i}"} for i in range(n)]) for tag, n in (("x", 30), ("y", 5))
    ]
    sources = [Source(paths[0], 0.5), Source(paths[1], 0.5)]
    for source in sources:
        source.format, source.weight, source.text_field, source.max_samples = "auto", 1.0, "text", None
        source.subset, source.dataset = None, None
    docs = load_documents(sources, seed=0, mixture=MixtureSection(stop="first_exhausted"))
    texts = [doc.text for doc in docs]
    assert texts.count("y4") == 1 and texts[-1] == "y4"  # first_exhausted: the draw that takes y's last row ends it
    assert [t for t in texts if t.startswith("y")] == [f"y{i}" for i in range(5)]


def test_a_stopped_mixed_run_resumes_to_the_same_weights(tmp_path):
    straight = SFTRecipe(mixed_sft(tmp_path, "straight"))
    straight.run()
    assert SFTRecipe(mixed_sft(tmp_path, "resumed", hard_stop="3steps")).run().global_step == 3
    resumed = SFTRecipe(mixed_sft(tmp_path, "resumed"))
    assert resumed.run().global_step == 4
    left, right = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(left[name], right[name]) for name in left)
