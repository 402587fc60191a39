"""VeOmni's arguments: ``self.args.model`` / ``.data`` / ``.train``, "extending the arguments" with a dataclass, and
``parse_args(Arguments)``.

VeOmni's ``args`` has three sections; a honing run config has one per component. ``self.args`` reads them so:

- ``args.model``: honing's ``model`` section (``model_path``: its ``name_or_path``; ``tokenizer_path``: the
  ``tokenizer.path``, else the model's).
- ``args.data``: honing's ``data`` section.
- ``args.train``: the recipe's own ``train`` section (``TrainingArguments`` and the keys a subclass adds, e.g.
  ``freeze_vit``) first, then honing's ``trainer`` section (``seed``, ``save_folder``, ``max_duration``, ...);
  ``args.train.optimizer`` is honing's ``optim`` section, with VeOmni's ``max_grad_norm`` (``grad_clip``) and
  ``type`` (``name``); ``global_batch_size`` and ``micro_batch_size`` are ``data``'s; ``output_dir`` is
  ``trainer.save_folder``.
- any other name: that section of honing's config (``args.scheduler``, ``args.parallel``, a recipe's own section).

The sections an ``Arguments`` dataclass declares beyond honing's (``train``) become sections of the run config
(``honing.config.custom_recipe``): ``train: {freeze_vit: true}`` in the YAML, validated, typo-checked and saved with
the run like honing's own keys.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from honing.config import ConfigError, load_config
from honing.config.custom_recipe import section_model


@dataclasses.dataclass
class TrainingArguments:
    """VeOmni's ``TrainingArguments``: the base of a recipe's own ``train`` section (its keys are the subclass's;
    honing's trainer and optimizer keys are read through ``self.args.train`` beside them)."""


@dataclasses.dataclass
class VeOmniArguments:
    """VeOmni's ``VeOmniArguments``: the config sections a ``BaseTrainer`` recipe adds to honing's (its ``model``
    and ``data`` are honing's own sections)."""

    train: TrainingArguments = dataclasses.field(default_factory=TrainingArguments)


def sections_of(arguments: type) -> dict[str, type]:
    """The config sections an ``Arguments`` class declares: its fields (a dataclass's or a pydantic model's) and
    their types."""
    if isinstance(arguments, type) and issubclass(arguments, BaseModel):
        return {name: field.annotation for name, field in arguments.model_fields.items()}
    if not (isinstance(arguments, type) and dataclasses.is_dataclass(arguments)):
        raise TypeError(f"arguments: expected a dataclass or a pydantic model, got {arguments!r}")
    try:
        hints = typing.get_type_hints(arguments)  # VeOmni writes them as strings: train: "MyTrainingArguments"
    except NameError as error:
        raise TypeError(f"{arguments.__name__}: cannot read its annotations: {error}") from None
    return {field.name: hints[field.name] for field in dataclasses.fields(arguments) if field.init}


def parse_args(arguments: type = VeOmniArguments, argv: Sequence[str] | None = None) -> Any:
    """VeOmni's ``parse_args(Arguments)``: ``CONFIG.yaml [key.path=value ...]`` (``sys.argv[1:]`` by default) as a
    validated run config holding the sections ``arguments`` declares."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or "=" in argv[0]:
        raise ConfigError("usage: SCRIPT CONFIG.yaml [key.path=value ...]")
    return load_config(argv[0], argv[1:], sections=sections_of(arguments))


class SectionView:
    """Attributes read from config sections in order, with VeOmni's names for some of honing's keys."""

    def __init__(self, name: str, sources: Sequence[Any], aliases: dict[str, Callable[[], Any]] | None = None):
        self._name, self._sources, self._aliases = name, tuple(sources), aliases or {}

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        if key in self._aliases:
            return self._aliases[key]()
        for source in self._sources:
            if key in type(source).model_fields:
                return getattr(source, key)
        names = ", ".join(type(source).__name__ for source in self._sources)
        raise AttributeError(f"args.{self._name}.{key}: no such key (read from {names})")


class ArgumentsView:
    """``self.args`` of a ``BaseTrainer``: VeOmni's ``model`` / ``data`` / ``train`` over the run config."""

    def __init__(self, config: Any, sections: dict[str, type]):
        self.config = config
        self.sections = sections
        self.loop: Any = None  # honing's Trainer, once built: the loop's counts

    def attach_loop(self, trainer: Any) -> None:
        """Read ``train_steps`` / ``num_train_epochs`` from ``trainer`` (the run's length and its data)."""
        self.loop = trainer

    def loop_count(self, name: str) -> int:
        """VeOmni's loop counts: ``train_steps`` the steps of one epoch, ``num_train_epochs`` the epochs the run
        spans (``trainer.max_duration``, rounded up to whole epochs)."""
        if self.loop is None:
            raise AttributeError(f"args.{name}: the run's loop is not built yet (read it from build_trainer on)")
        per_epoch, total = self.loop.steps_per_epoch, self.loop.max_steps
        if name == "train_steps":
            return per_epoch if per_epoch else total
        return -(-total // per_epoch) if per_epoch and total else 1

    @property
    def train_steps(self) -> int:
        """VeOmni's ``args.train_steps``: the optimizer steps of one epoch."""
        return self.loop_count("train_steps")

    def section(self, name: str) -> Any:
        """The config's section ``name``; a declared section the config was validated without: its defaults."""
        value = getattr(self.config, name, None)
        if value is None and name in self.sections:
            value = section_model(self.sections[name], name).model_validate({})
        return value

    @property
    def model(self) -> SectionView:
        """honing's ``model`` section (``model_path``, ``tokenizer_path`` as VeOmni names them)."""
        model, tokenizer = self.config.model, self.config.tokenizer
        aliases = {
            "model_path": lambda: model.name_or_path,
            "tokenizer_path": lambda: tokenizer.path or model.name_or_path,
        }
        return SectionView("model", [model], aliases)

    @property
    def data(self) -> Any:
        """honing's ``data`` section."""
        return self.config.data

    @property
    def train(self) -> SectionView:
        """The recipe's own ``train`` section, then honing's ``trainer``; ``optimizer``: the ``optim`` section."""
        optim, data, trainer = self.config.optim, self.config.data, self.config.trainer
        optimizer = SectionView(
            "train.optimizer", [optim], {"max_grad_norm": lambda: optim.grad_clip, "type": lambda: optim.name}
        )
        aliases = {
            "optimizer": lambda: optimizer,
            "global_batch_size": lambda: data.global_batch_size,
            "micro_batch_size": lambda: data.micro_batch_size,
            "output_dir": lambda: trainer.save_folder,
            "num_train_epochs": lambda: self.loop_count("num_train_epochs"),
            "train_steps": lambda: self.loop_count("train_steps"),
        }
        own = self.section("train")
        if own is None or "vit_lr" not in type(own).model_fields:  # the recipe's own key first, else honing's
            aliases["vit_lr"] = lambda: optim.vision_lr if optim.vision_lr is not None else optim.lr
        return SectionView("train", [trainer] if own is None else [own, trainer], aliases)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = self.section(name)
        if value is None and name not in type(self.config).model_fields:
            raise AttributeError(f"args.{name}: not a section of the run config")
        return value
