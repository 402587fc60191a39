"""Other systems' dataset mixtures as honing's ``data.<split>.mixture`` (docs/data.md#mixtures): Oumi's
``mixture_proportion`` / ``mixture_strategy`` / the split's ``seed``, LLaMA-Factory's ``mix_strategy`` /
``interleave_probs``. Both call ``datasets.interleave_datasets``, whose rows honing's mixture draws for a seed."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Keys, Translation

OUMI_STRATEGIES = ("first_exhausted", "all_exhausted")  # Oumi's MixtureStrategy values
# LLaMA-Factory's merge_dataset: interleave_under / _over / _once -> interleave_datasets' stopping strategy
LLAMAFACTORY_STOPS = {
    "interleave_under": "first_exhausted",
    "interleave_over": "all_exhausted",
    "interleave_once": "all_exhausted_without_replacement",
}


def oumi_mixture(t: Translation, split_keys: Keys, items: list[Any], sources: list[dict[str, Any]], split: str) -> None:
    """Oumi interleaves a split's datasets by ``mixture_proportion`` only when every one has one (its seed the
    split's ``seed``, unseeded when absent); otherwise it concatenates them, as honing does without a mixture."""
    datasets = split_keys.key("datasets")
    proportions = [item.get("mixture_proportion") if isinstance(item, dict) else None for item in items]
    given = [index for index, value in enumerate(proportions) if value is not None]
    strategy, seed = split_keys.take("mixture_strategy"), split_keys.take("seed")
    if given and len(given) < len(proportions):
        for index in given:
            t.refuse(
                f"{datasets}[{index}].mixture_proportion",
                "given for some datasets only; Oumi requires one on every dataset of the split",
            )
        return
    if not given or len(given) == 1:  # one dataset mixed alone is that dataset's rows
        moot = "unused: Oumi concatenates datasets unless each of several has a mixture_proportion (honing does too)"
        if strategy is not None and strategy != "first_exhausted":
            t.note(split_keys.key("mixture_strategy"), moot)
        if seed is not None:
            t.note(split_keys.key("seed"), moot)
        if given:
            t.note(f"{datasets}[{given[0]}].mixture_proportion", "one dataset mixed alone gives its own rows")
        return
    bad = [index for index in given if not _positive(proportions[index])]
    if bad:
        t.refuse(f"{datasets}[{bad[0]}].mixture_proportion", f"{proportions[bad[0]]!r}: expected a number > 0")
        return
    if strategy is not None and strategy not in OUMI_STRATEGIES:
        t.refuse(split_keys.key("mixture_strategy"), f"{strategy!r}: expected one of {', '.join(OUMI_STRATEGIES)}")
        return
    if len(sources) != len(items):
        return  # a dataset was refused: its line says why, and the mixture cannot be matched to the sources
    for source, proportion in zip(sources, proportions):
        source["proportion"] = float(proportion)
    mixture: dict[str, Any] = {"stop": strategy or "first_exhausted"}
    if seed is not None:
        mixture["seed"] = int(seed)
    else:  # Oumi then interleaves unseeded (another mix each run); honing's draw is seeded
        t.note(split_keys.key("datasets"), "the mixture's draw is seeded by trainer.seed (Oumi's split seed is unset)")
    t.set(f"data.{split}.mixture", mixture)


def llamafactory_mixture(t: Translation, top: Keys, dataset_counts: dict[str, int]) -> None:
    """``mix_strategy`` (its training ``seed``, which honing's ``trainer.seed`` already is) and ``interleave_probs``
    (a comma-separated string or a list) on every split LLaMA-Factory merges; ``dataset_counts``: each split's
    number of data sets, which the probabilities must match."""
    strategy = str(top.take("mix_strategy", "concat"))
    probabilities = top.take("interleave_probs")
    if strategy == "concat":
        if probabilities is not None:
            t.note("interleave_probs", "unused with mix_strategy concat (as in LLaMA-Factory)")
        return
    if strategy not in LLAMAFACTORY_STOPS:
        t.refuse("mix_strategy", f"{strategy!r}: expected concat or one of {', '.join(LLAMAFACTORY_STOPS)}")
        return
    proportions = _probabilities(t, probabilities)
    if proportions is False:
        return
    for split, count in dataset_counts.items():
        sources = t.get(f"data.{split}.sources") or []
        if proportions is not None and len(proportions) != count:
            t.refuse("interleave_probs", f"{len(proportions)} probabilities for {count} data set(s) of {split}")
            return
        if len(sources) != count:
            t.refuse("mix_strategy", f"{split}'s data sets give {len(sources)} sources for {count} names: mixed by "
                     "data set, they cannot be matched")  # fmt: skip
            return
        if proportions is not None:
            for source, proportion in zip(sources, proportions):
                source["proportion"] = proportion
        t.set(f"data.{split}.mixture", {"stop": LLAMAFACTORY_STOPS[strategy]})


def _probabilities(t: Translation, value: Any) -> list[float] | None | bool:
    """``interleave_probs`` as numbers > 0 (None: the data sets take turns); False after a refusal."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    try:
        numbers = [float(part) for part in parts]
    except (TypeError, ValueError):
        numbers = []
    if not numbers or not all(_positive(number) for number in numbers):
        t.refuse("interleave_probs", f"{value!r}: expected numbers > 0 separated by commas, one per data set")
        return False
    return numbers


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
