"""A YAML written for ``oumi train`` with keys Oumi does not have (``model.name``, ``train:``, ``training.method``).
Neither an Oumi config ``is_oumi`` recognises nor a honing one: told apart from a honing config with a misspelt key,
so it is refused as an Oumi config naming each key Oumi lacks, instead of being taken for a honing config. One that
``is_oumi`` takes (it has a ``training`` section): its refusal names each such key as not Oumi's, with Oumi's key for
it where the schema has one (``keys_oumi_lacks`` walks the file against Oumi's key table)."""

from __future__ import annotations

from typing import Any

from honing.config.schema import RunConfig
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.translation import Translation, one_line

SOURCE, KEYS = key_table("oumi")

# honing's top-level keys that Oumi's TrainingConfig also has: a file may share these and still be Oumi's
SHARED_SECTIONS = ("model", "data")


def looks_like_oumi(raw: dict[str, Any]) -> bool:
    """An Oumi-shaped file: a ``model`` / ``data`` section (Oumi's and honing's alike) beside top-level keys honing
    lacks, no top-level key only honing has, and a key in a shared section that honing's section lacks too (so a
    honing config with a misspelt section name stays honing's, refused by honing's own check)."""
    honing_keys = set(RunConfig.model_fields)
    if not any(isinstance(raw.get(name), dict) for name in SHARED_SECTIONS):
        return False
    if any(key in honing_keys and key not in SHARED_SECTIONS for key in raw):
        return False
    if all(key in honing_keys for key in raw):
        return False
    for name in SHARED_SECTIONS:
        section = raw.get(name)
        fields = set(RunConfig.model_fields[name].annotation.model_fields)
        if isinstance(section, dict) and any(key not in fields for key in section):
            return True
    return False


def refuse_unknown_oumi_keys(raw: dict[str, Any]) -> Translation:
    """A translation refusing, one line each, the top-level keys and the sections' keys Oumi's schema lacks."""
    t = Translation("Oumi")
    for key, group in keys_oumi_lacks(raw):
        t.refuse(key, lacking_reason(key, group))
    if not t.refused:  # every key is Oumi's: looks_like_oumi would not have sent it here
        raise ValueError("refuse_unknown_oumi_keys: every key of the file is Oumi's")
    return t


# the sections whose keys Oumi's schema lists, searched in this order for a key written in the wrong section
HOME_GROUPS = ("training", "model", "peft", "data.<split>", "data.<split>.datasets[]")
# names that configs written by hand for `oumi train` use for Oumi's keys (model.name, training.batch_size, ...)
RENAMED = {
    "name": "model.model_name", "base_model": "model.model_name", "model_name_or_path": "model.model_name",
    "dtype": "model.torch_dtype_str", "torch_dtype": "model.torch_dtype_str",
    "max_seq_length": "model.model_max_length", "max_seq_len": "model.model_max_length",
    "method": "training.trainer_type", "batch_size": "training.per_device_train_batch_size",
    "num_epochs": "training.num_train_epochs", "epochs": "training.num_train_epochs",
    "adapter_method": "training.use_peft", "target_modules": "peft.lora_target_modules",
    "fp16": "training.mixed_precision_dtype", "bf16": "training.mixed_precision_dtype",
    "train_file": "data.train.datasets[].dataset_path",
}  # fmt: skip
# the same inside one data set: its hub name and its file
RENAMED_IN_DATASET = {"name": "dataset_name", "path": "dataset_path", "data_files": "dataset_path"}


def keys_oumi_lacks(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted key, its group in Oumi's table) for each key of ``raw`` Oumi's schema lacks, in file order; the keys
    under a key Oumi lacks are not listed (free-form kwargs mappings are not walked)."""
    found: list[tuple[str, str]] = []

    def walk(values: Any, group: str, path: str) -> None:
        if not isinstance(values, dict) or group not in KEYS:
            return
        for name, value in values.items():
            key = f"{path}.{name}" if path else str(name)
            if name not in KEYS[group]:
                found.append((key, group))
            elif group == "data":
                walk(value, "data.<split>", key)
            elif group == "data.<split>" and name == "datasets" and isinstance(value, list):
                for index, item in enumerate(value):
                    walk(item, "data.<split>.datasets[]", f"{key}[{index}]")
            else:
                walk(value, f"{group}.{name}" if group else str(name), key)

    walk(raw, "", "")
    return found


def lacking_reason(key: str, group: str) -> str:
    """Why ``key`` (of Oumi's ``group``) is refused: Oumi lacks it, and the key Oumi has for it when one is known."""
    parent, _, name = key.rpartition(".")
    home = None
    if group.endswith("datasets[]") and name in RENAMED_IN_DATASET:
        home = f"{parent}.{RENAMED_IN_DATASET[name]}"
    home = home or RENAMED.get(name)
    if home is None:  # the same name in another of Oumi's sections: written in the wrong place
        home = next((f"{g}.{name}" for g in HOME_GROUPS if g != group and name in KEYS[g]), None)
    hint = f"Oumi's key is {home.replace('<split>', 'train')}" if home else "check its spelling"
    return f"not a key of Oumi's TrainingConfig ({hint})"


def name_keys_oumi_lacks(t: Translation, raw: dict[str, Any]) -> None:
    """In a refused translation, each key Oumi's schema lacks is refused as such (not as a key honing does not
    translate), and one the translation dropped unread (under a data set it could not read) is named too; a key
    honoured from an older Oumi (noted) is left as it is, and a translation with no refusal is not touched."""
    if not t.refused:
        return
    lacking = {one_line(key): group for key, group in keys_oumi_lacks(raw)}  # as the lines name them
    named = {line.split(": ", 1)[0] for line in t.refused + t.notes}
    lines = []
    for line in t.refused:
        key, _, why = line.partition(": ")
        generic = why.startswith("not translated: ")
        lines.append(f"{key}: {lacking_reason(key, lacking[key])}" if key in lacking and generic else line)
    lines += [f"{key}: {lacking_reason(key, group)}" for key, group in lacking.items() if key not in named]
    t.refused = lines
