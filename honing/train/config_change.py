"""What changed between the config a checkpoint was saved with and this run's, and whether it can resume.

A checkpoint holds the run's ``config.yaml`` (secrets redacted), the model's ``model/config.json`` and the
tokenizer's files. A change
of the model's shape, the tokenizer or the vocabulary makes its weights meaningless to this run, and a change of
the optimizer or of its parameter groups makes its saved moments unloadable: resuming refuses, naming the key and
both values. Anything else (lr, betas, the schedule, duration, intervals, data, callbacks ...) is allowed, listed,
and in force from the resumed step: the run is rebuilt from this run's config, and what the checkpoint restores
over it (the optimizer's settings, the RNG after a changed seed, the best model of another metric) is put back or
started anew (``RESTORED_STATE`` says how; tests/faults/test_resume_changes.py shows each key).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from honing.config.optimizers import resolve_optimizer
from honing.errors import ConfigError

RUN_CONFIG_FILE = "config.yaml"
MODEL_CONFIG_FILE = "model/config.json"
TOKENIZER_FILE = "tokenizer/tokenizer.json"
COMPARED_FILES = (RUN_CONFIG_FILE, MODEL_CONFIG_FILE, TOKENIZER_FILE)

# Keys of config.yaml whose change breaks a checkpoint (a key or any key under it).
BREAKING_KEYS = (
    "method",
    "model.name_or_path",
    "model.config",
    "model.lora",
    "model.freeze_layers",
    "model.freeze_vision",
    "model.freeze_projector",
    "model.freeze_language",
    "tokenizer",
)
# What a checkpoint restores over the objects this run built from its config, and how a changed key still takes
# effect. A new piece of restored state needs its line here (a test compares this with what is saved).
RESTORED_STATE = {
    "model": "the weights; the keys that shape them (BREAKING_KEYS, config.json's sizes) refuse to resume",
    "optim": "the moments and step counts; the settings (lr, initial_lr, betas, eps, weight_decay, momentum, per-group "
    "lr) are this run's (train_module.restore_hyperparameters); the layout (OPTIMIZER_LAYOUT) refuses to resume",
    "global_step": "the schedule's position: the LR is the schedule of this run's keys at that step",
    "global_train_tokens_seen": "a count",
    "global_train_petaflops": "a count",
    "epoch": "the data position",
    "world_size": "compared: a change re-seeds the RNG",
    "seed": "compared: a changed trainer.seed re-seeds the RNG and the data order of the rest of the epoch",
    "data_loader": "the position; a changed global_batch_size keeps the rows consumed, a changed seed the position",
    "rng": "this run's, re-seeded when trainer.seed or the world size changed",
    "callbacks": "checkpointer: the checkpoints it keeps; best_model: the best so far, dropped when its metric or "
    "direction changed; loss_spike: the running statistics of the loss; wandb: the W&B run id",
}

# The settings that decide which tensors the optimizer's state holds and in which groups: the moments saved under
# one cannot be loaded into another (a new optimizer starts from the weights through trainer.load_path instead).
OPTIMIZER_LAYOUT = ("optim.name", "optim.state_dtype", "optim.param_groups", "optim.vision_lr", "parallel.offload")

# Keys of the model's config.json that give a tensor's shape (at any depth: text_config.hidden_size too).
_SHAPE_KEY = re.compile(r"(^|\.)(model_type|vocab_size|tie_word_embeddings|\w*_size|num_\w+|\w*_dim|\w*_layers)$")


@dataclass(frozen=True)
class Change:
    """One key whose value differs: as saved in the checkpoint, and in this run."""

    key: str
    saved: Any
    current: Any

    def describe(self) -> str:
        """``key: saved -> current``."""
        return f"{self.key}: {_show(self.saved)} -> {_show(self.current)}"


def _show(value: Any) -> str:
    return "(unset)" if value is _MISSING else json.dumps(value, default=str)


_MISSING = object()


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{"a.b.c": leaf}``; lists are leaves."""
    if isinstance(value, dict) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value} if prefix else {}


def changes(saved: dict[str, Any], current: dict[str, Any]) -> list[Change]:
    """Every flattened key whose value differs between ``saved`` and ``current``, sorted by key."""
    old, new = flatten(saved), flatten(current)
    return [
        Change(key, old.get(key, _MISSING), new.get(key, _MISSING))
        for key in sorted(old.keys() | new.keys())
        if old.get(key, _MISSING) != new.get(key, _MISSING)
    ]


def _breaks(key: str) -> bool:
    return any(key == prefix or key.startswith(prefix + ".") for prefix in BREAKING_KEYS)


def _new_in_schema(change: Change, keys: set[str]) -> bool:
    """A key only one side has, with nothing above or below it on the other: a key a newer (or older) version
    of honing or transformers writes with its default, not a change the user made (``model.lora`` set where it
    was null is a change: the other side has ``model.lora`` itself)."""
    if change.saved is not _MISSING and change.current is not _MISSING:
        return False
    key = change.key
    return not any(k != key and (k.startswith(key + ".") or key.startswith(k + ".")) for k in keys)


def _at(tree: Any, key: str) -> Any:
    """The value at dotted ``key`` in a nested mapping (a whole section too), or ``_MISSING``."""
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _parse(name: str, contents: str | bytes | None) -> dict[str, Any] | None:
    if contents is None:
        return None
    text = contents.decode() if isinstance(contents, bytes) else contents
    try:
        parsed = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None  # unreadable: the checkpoint's own load reports what is wrong with it
    return parsed if isinstance(parsed, dict) else None


def _vocab(tokenizer: dict[str, Any]) -> dict[str, int]:
    model = tokenizer.get("model")
    vocab = dict(model.get("vocab") or {}) if isinstance(model, dict) and isinstance(model.get("vocab"), dict) else {}
    for added in tokenizer.get("added_tokens") or []:
        if isinstance(added, dict) and "content" in added:
            vocab[str(added["content"])] = added.get("id")
    return vocab


def _vocabulary_change(saved: dict[str, Any] | None, current: str | bytes | None) -> Change | None:
    """The tokenizer's token -> id table differs (same size or not): the embedding rows mean other tokens."""
    new_tokenizer = _parse(TOKENIZER_FILE, current)
    if saved is None or new_tokenizer is None:
        return None
    old, new = _vocab(saved), _vocab(new_tokenizer)
    differ = sorted(token for token in old.keys() | new.keys() if old.get(token) != new.get(token))
    if not differ:
        return None
    example = ", ".join(repr(token) for token in differ[:3])
    return Change("tokenizer vocabulary", f"{len(old)} tokens", f"{len(new)} tokens, {len(differ)} differ ({example})")


def _optimizer_layout(config: dict[str, Any]) -> dict[str, Any]:
    """The part of each ``OPTIMIZER_LAYOUT`` key that shapes the optimizer's state: the optimizer (aliases
    resolved), its state's dtype, each user group's patterns and whether it splits by weight decay, whether the
    vision tower has a group, whether AdamW's state lives on the host."""
    optim = config.get("optim") if isinstance(config.get("optim"), dict) else {}
    parallel = config.get("parallel") if isinstance(config.get("parallel"), dict) else {}
    try:
        name = resolve_optimizer(str(optim.get("name", "adamw")))[0]
    except ValueError:
        name = optim.get("name")
    groups = [g for g in optim.get("param_groups") or [] if isinstance(g, dict)]
    return {
        "optim.name": name,
        "optim.state_dtype": optim.get("state_dtype"),
        "optim.param_groups": [(g.get("params"), g.get("weight_decay") is None) for g in groups],
        "optim.vision_lr": optim.get("vision_lr") is not None,
        "parallel.offload": parallel.get("offload", "none") == "optimizer",
    }


def _layout_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    before, after = _optimizer_layout(old), _optimizer_layout(new)
    return [Change(key, _at(old, key), _at(new, key)) for key in OPTIMIZER_LAYOUT if before[key] != after[key]]


def check_resume(
    checkpoint: str, saved: dict[str, str | bytes | None], current: dict[str, str | bytes]
) -> list[Change]:
    """Compare a checkpoint's saved ``config.yaml``, ``model/config.json`` and ``tokenizer/tokenizer.json``
    (``saved``, None when absent) with this run's (``current``): raise ``ConfigError`` naming the first change
    that breaks the checkpoint, else return the allowed changes (a file missing on either side is not compared)."""
    breaking: list[Change] = []
    allowed: list[Change] = []
    for name in (RUN_CONFIG_FILE, MODEL_CONFIG_FILE):  # the tokenizer's vocabulary is compared below
        old, new = _parse(name, saved.get(name)), _parse(name, current.get(name))
        if old is None or new is None:
            continue
        keys = flatten(old).keys() | flatten(new).keys()
        layout = _layout_changes(old, new) if name == RUN_CONFIG_FILE else []
        breaking += layout
        for change in changes(old, new):
            if any(change.key == c.key or change.key.startswith(c.key + ".") for c in layout):
                continue  # named once, above
            if name == MODEL_CONFIG_FILE:  # the model's own view of its shape, however the config named it
                if _SHAPE_KEY.search(change.key) and not _new_in_schema(change, keys):
                    breaking.append(Change(f"model config.json {change.key}", change.saved, change.current))
            elif _breaks(change.key) and not _new_in_schema(change, keys):
                if not any(change.key.startswith(b.key + ".") for b in breaking):  # a section is named once, whole
                    breaking.append(Change(change.key, _at(old, change.key), _at(new, change.key)))
            else:
                allowed.append(change)
    vocabulary = _vocabulary_change(_parse(TOKENIZER_FILE, saved.get(TOKENIZER_FILE)), current.get(TOKENIZER_FILE))
    if vocabulary is not None:
        breaking.append(vocabulary)
    if breaking:
        first = breaking[0]
        more = f" (and {len(breaking) - 1} more: {', '.join(c.key for c in breaking[1:4])})" if breaking[1:] else ""
        if first.key in OPTIMIZER_LAYOUT:
            why = (
                "the optimizer's saved state (its moments, in its parameter groups) cannot be loaded into another "
                "optimizer or grouping: restore the saved value, or train into a new trainer.save_folder with "
                f"trainer.load_path: {checkpoint} and trainer.load_optim_state: false (these weights, a new optimizer)"
            )
        else:
            why = (
                "a changed model, tokenizer or vocabulary cannot resume from it: restore the saved value or train "
                "into a new trainer.save_folder"
            )
        raise ConfigError(
            f"{first.key}: the checkpoint {checkpoint} was saved with {_show(first.saved)}, this run has "
            f"{_show(first.current)}{more}; {why}"
        )
    return allowed
