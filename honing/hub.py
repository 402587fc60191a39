"""Names of pretrained models and tokenizers: a local folder or a Hugging Face hub id, told apart before
transformers is asked (its error for a missing folder is about repo id syntax)."""

from __future__ import annotations

import os

from honing.errors import ConfigError

# The folders a honing run writes its exported model to, at the end (hf) and for its best checkpoint (best).
EXPORT_FOLDERS = ("hf", "best")


def is_hub_id(name: str) -> bool:
    """True when ``name`` is a valid hub id (``gpt2``, ``Qwen/Qwen2-0.5B``) and not a relative path into a local
    folder (``runs/hf`` when ``runs/`` exists here is that folder's ``hf``, not user ``runs``'s repo ``hf``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return "/" not in name or not os.path.isdir(name.split("/", 1)[0])


def check_name_or_path(name_or_path: str, key: str) -> None:
    """Raise a one-line ConfigError naming ``key`` unless ``name_or_path`` is an existing folder or a hub id."""
    if os.path.isdir(name_or_path) or is_hub_id(name_or_path):
        return
    if os.path.exists(name_or_path):
        raise ConfigError(
            f"{key}: {name_or_path} is a file; expected a model folder (with config.json) or a Hugging Face hub id"
        )
    raise ConfigError(
        f"{key}: the folder {name_or_path} does not exist (and it is not a Hugging Face hub id)"
        f"{missing_export_hint(name_or_path)}"
    )


def missing_export_hint(path: str) -> str:
    """How to create ``path`` when it is where a honing run exports its model (``SAVE_FOLDER/hf``), else ''."""
    save_folder, name = os.path.split(os.path.normpath(path))
    if name not in EXPORT_FOLDERS or not save_folder:
        return ""
    if os.path.basename(save_folder) == "quickstart":
        return "; the quickstart writes it: run `make train` (the quickstart) first"
    return f"; a run with trainer.save_folder={save_folder} writes it: train that run first"
