"""Names of pretrained models and tokenizers: a local folder or a Hugging Face hub id, told apart before
transformers is asked (its error for a missing folder is about repo id syntax)."""

from __future__ import annotations

import os

from honing.errors import ConfigError
from honing.example_outputs import EXPORT_FOLDERS, how_to_make, looks_like_example_output, missing_folder_message

__all__ = ["EXPORT_FOLDERS", "check_name_or_path", "hub_load_error", "is_hub_id", "missing_export_hint"]


def is_hub_id(name: str) -> bool:
    """True when ``name`` is a valid hub id (``gpt2``, ``Qwen/Qwen2-0.5B``) and not a relative path into a local
    folder (``runs/hf`` when ``runs/`` exists here is that folder's ``hf``, not user ``runs``'s repo ``hf``) nor where
    an example writes its model (``runs/...``, an example config's ``SAVE_FOLDER/hf``), which may not exist yet."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    if looks_like_example_output(name):
        return False
    return "/" not in name or not os.path.isdir(name.split("/", 1)[0])


def check_name_or_path(name_or_path: str, key: str) -> None:
    """Raise a one-line ConfigError naming ``key`` unless ``name_or_path`` is an existing folder or a hub id; a
    missing example output names the example that writes it (``honing.example_outputs``)."""
    if os.path.isdir(name_or_path) or is_hub_id(name_or_path):
        return
    if os.path.exists(name_or_path):
        raise ConfigError(
            f"{key}: {name_or_path} is a file; expected a model folder (with config.json) or a Hugging Face hub id"
        )
    raise ConfigError(missing_folder_message(key, name_or_path))


def missing_export_hint(path: str) -> str:
    """How to create ``path`` when an example writes it (``; it is the output of configs/X.yaml; run ...``), else
    ''."""
    making = how_to_make(path)
    return "" if making is None else f"; {making}"


def hub_load_error(key: str, name_or_path: str, error: BaseException) -> ConfigError:
    """The one-line ConfigError, naming ``key``, for a model, config or tokenizer that transformers could not load
    from ``name_or_path`` (its OSError): the hub cannot be reached, no such repository, a gated one, or its reason."""
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    causes = error_chain(error)
    if is_hub_id(name_or_path) and not os.path.isdir(name_or_path):
        if any(isinstance(cause, LocalEntryNotFoundError) for cause in causes):
            offline = " (HF_HUB_OFFLINE is set)" if hub_offline() else ""
            return ConfigError(
                f"{key}: {name_or_path!r} is a Hugging Face hub name, the hub cannot be reached from here{offline} "
                f"and it is not in the local cache; download it where the hub is reachable (`hf download "
                f"{name_or_path}`) and copy the cache or the folder here, or give a local folder"
            )
        if any(isinstance(cause, GatedRepoError) for cause in causes):
            return ConfigError(
                f"{key}: {name_or_path!r} is a gated model on the Hugging Face hub; accept its terms on its hub page "
                "and log in (`hf auth login` or HF_TOKEN)"
            )
        if any(isinstance(cause, RepositoryNotFoundError) for cause in causes):
            return ConfigError(
                f"{key}: no model {name_or_path!r} on the Hugging Face hub (check the name; a private one needs "
                "`hf auth login` or HF_TOKEN)"
            )
    return ConfigError(f"{key}: cannot load {name_or_path!r}: {' '.join(str(error).split())}")


def error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or while handling, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def hub_offline() -> bool:
    """True when huggingface_hub is told not to use the network (``HF_HUB_OFFLINE``)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)
