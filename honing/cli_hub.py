"""What each ``honing`` verb may need from the Hugging Face Hub, so that it runs offline when it needs nothing from
there (``honing.hub_access``): ``plan`` needs only a config.json (none when the config carries ``model.shape``, as
the presets do), training and the data verbs need the models and hub data sets their config names, the model verbs
their MODEL_OR_RUN, ``push`` the network itself; the other verbs read local files only."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from honing.config import HoningError
from honing.hub_access import HubNeed, hub_access

if TYPE_CHECKING:
    from honing.config import RunConfig

#: verbs that read a config whose models and data sets may live on the hub
CONFIG_VERBS = ("train", "data", "prepare", "plan")
#: verbs whose MODEL_OR_RUN may be a hub name
MODEL_VERBS = ("generate", "chat", "eval", "serve")
#: verbs whose job is the network: left as huggingface_hub decides
ONLINE_VERBS = ("push",)


def hub_access_for(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """The hub access the parsed command ``args`` runs under."""
    if args.verb in ONLINE_VERBS:
        return contextlib.nullcontext()
    return hub_access(list(needs_of(args)))


def needs_of(args: argparse.Namespace) -> Iterator[HubNeed]:
    """What the command ``args`` may read from the hub."""
    if args.verb in MODEL_VERBS:
        yield HubNeed("MODEL_OR_RUN", args.model)
        if args.verb == "eval":  # an lm-eval task reads its data set from the hub, whatever its name says
            yield HubNeed("--tasks", ",".join(args.tasks), always=True)
    elif args.verb in CONFIG_VERBS:
        config = loaded_config(args)
        if config is not None:
            yield from (plan_needs(config) if args.verb == "plan" else run_needs(config))


def loaded_config(args: argparse.Namespace) -> RunConfig | None:
    """The command's config, or None when it does not load (the verb itself then says why, on one line)."""
    from honing.cli_configs import split_config_and_overrides
    from honing.interop.configs import load_any_config

    path, overrides = args.config, args.overrides
    if args.verb == "train":
        path, overrides = split_config_and_overrides(path, overrides)
    try:
        return load_any_config(path, overrides, getattr(args, "from_dialect", None))
    except HoningError:
        return None


def plan_needs(config: RunConfig) -> Iterator[HubNeed]:
    """``honing plan`` reads the model's config.json (not when ``model.shape`` carries it) and, for a vocabulary,
    the tokenizer's files."""
    if config.model.name_or_path and config.model.shape is None:
        yield HubNeed("model.name_or_path", config.model.name_or_path, enough_cached="config.json")
    if config.tokenizer.path:
        yield HubNeed("tokenizer.path", config.tokenizer.path, enough_cached="tokenizer_config.json")


def run_needs(config: RunConfig) -> Iterator[HubNeed]:
    """A run reads its models (weights included: a cached config.json is not enough), its data sets, the data sets of
    its lm-eval tasks and any ``hf://`` URL, and pushes to ``callbacks.hub.repo_id``."""
    from honing.recipes.prerequisites import model_inputs  # what training imports anyway (torch and the recipes)

    for key, name in model_inputs(config):
        yield HubNeed(key, name)
    harness = config.callbacks.harness_eval
    if harness.enabled and harness.tasks:
        yield HubNeed("callbacks.harness_eval.tasks", ",".join(harness.tasks), always=True)
    for key, value in hf_urls(config.model_dump(), ""):
        yield HubNeed(key, value, always=True)
    if config.callbacks.hub.repo_id:  # the run pushes there: online whenever the hub answers
        yield HubNeed("callbacks.hub.repo_id", config.callbacks.hub.repo_id, always=True)
    yield from dataset_needs(config)


def hf_urls(value: object, key: str) -> Iterator[tuple[str, str]]:
    """``(key, url)`` of every ``hf://`` URL in the config (fsspec's Hugging Face file system: a save or upload
    folder, a data path)."""
    if isinstance(value, str) and value.startswith("hf://"):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from hf_urls(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from hf_urls(item, f"{key}[{index}]")


def dataset_needs(config: RunConfig) -> Iterator[HubNeed]:
    """The data sources that name a hub data set (``owner/name`` or ``owner/name:split``, nothing local there)."""
    from honing.data.row_reader import SPLIT_SUFFIX, reads_with_datasets

    for split in ("train", "validation"):
        section = getattr(config.data, split, None)
        for index, source in enumerate(section.sources if section is not None else []):
            match = SPLIT_SUFFIX.match(source.path)
            base = match["base"] if match else source.path
            if "://" in base:  # a URL (s3://, gs://, hf://...) is its storage's, never a hub data set's name;
                continue  # asking whether one is would reach that storage before the run starts
            if not os.path.exists(base) and reads_with_datasets(source.path):
                yield HubNeed(f"data.{split}.sources[{index}].path", base)
