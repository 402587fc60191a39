"""``honing push RUN REPO_ID``: upload a run's ``hf/`` (or ``adapter/``) folder, model card included, to the Hugging
Face Hub with ``huggingface_hub``. Needs a token (``--token``, ``HF_TOKEN`` or a saved login) and the network."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from honing.errors import ConfigError

if TYPE_CHECKING:
    from huggingface_hub import HfApi


def folder_to_push(run: str, *, adapter: bool) -> str:
    """The folder to upload: ``RUN/adapter`` or ``RUN/hf``, or RUN itself when it is such a folder."""
    marker = "adapter_config.json" if adapter else "config.json"
    for folder in (os.path.join(run, "adapter" if adapter else "hf"), run):
        if os.path.isfile(os.path.join(folder, marker)):
            return folder
    what = "LoRA adapter (adapter/ with adapter_config.json)" if adapter else "model (hf/ with config.json)"
    raise ConfigError(f"RUN: {run} holds no {what}; train the run first, or give the folder itself")


def hub_token(token: str | None) -> str:
    """``--token``, else ``HF_TOKEN`` or the login ``hf auth login`` saved; a one-line error when there is none."""
    from huggingface_hub import get_token

    where = "--token" if token else "HF_TOKEN" if os.environ.get("HF_TOKEN") else "the saved login"
    found = (token or os.environ.get("HF_TOKEN") or get_token() or "").strip()
    if not found:
        raise ConfigError("push: no Hugging Face token: pass --token, set HF_TOKEN or run `hf auth login`")
    if not found.isascii() or not found.isprintable() or any(char.isspace() for char in found):
        # an HTTP header carries it: anything else fails deep in the HTTP client (never echoed: it is a secret)
        raise ConfigError(
            f"{where}: not a Hugging Face token (printable ASCII without spaces); copy it again from "
            "https://huggingface.co/settings/tokens"
        )
    return found


def push(
    run: str,
    repo_id: str,
    *,
    adapter: bool = False,
    private: bool = False,
    token: str | None = None,
    revision: str | None = None,
    api: HfApi | None = None,
) -> str:
    """Create ``repo_id`` if needed and upload the run's folder to it; the commit's URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ConfigError(f"REPO_ID: {repo_id!r} is not a Hub repository id ({error})") from None
    folder = folder_to_push(run, adapter=adapter)
    if not os.path.isfile(os.path.join(folder, "README.md")) and not adapter:
        raise ConfigError(f"push: {folder} has no README.md model card; re-export it with `honing export`")
    api = api or HfApi(token=hub_token(token))
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            repo_type="model",
            revision=revision,
            commit_message=f"Upload {os.path.basename(os.path.normpath(folder))}/ with honing",
        )
    except Exception as error:
        refusal = hub_refusal(error, repo_id)
        if refusal is None:
            raise
        raise refusal from None
    return str(getattr(commit, "commit_url", commit))


#: the exception classes, by name, of a request that got no answer: the builtin ConnectionError (huggingface_hub's
#: OfflineModeIsEnabled), httpx's TransportError (connect, DNS, timeouts), requests' ConnectionError and Timeout
NO_ANSWER = {"ConnectionError", "TransportError", "Timeout"}


def hub_refusal(error: BaseException, repo_id: str) -> ConfigError | None:
    """The one-line error for an upload the Hub did not answer or refused (bad token, no rights), else None."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(error, OfflineModeIsEnabled):
        return ConfigError(
            f"push: cannot reach the Hugging Face Hub to upload {repo_id}: HF_HUB_OFFLINE is set; unset it and run "
            "the push again where the hub is reachable"
        )
    if any(cls.__name__ in NO_ANSWER for cls in type(error).__mro__):
        reason = " ".join(str(error).split()) or type(error).__name__
        return ConfigError(
            f"push: cannot reach the Hugging Face Hub to upload {repo_id} ({reason}); check the network (or "
            "HF_ENDPOINT, proxies) and run the push again"
        )
    if isinstance(error, HfHubHTTPError):
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return ConfigError(
            f"push: the Hugging Face Hub refused the upload to {repo_id} ({reason}); check the token (--token, "
            "HF_TOKEN or `hf auth login`) and its write access to the repository"
        )
    return None


def run_push(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Carry out ``honing push``; returns the exit code."""
    out = out or sys.stdout
    url = push(
        args.run, args.repo_id, adapter=args.adapter, private=args.private, token=args.token, revision=args.revision
    )
    out.write(f"pushed {folder_to_push(args.run, adapter=args.adapter)} to {url}\n")
    return 0
