"""OLMo-core's ``unshard_checkpoint``: a train checkpoint's sharded model (and optimizer) state written after the fact
as whole, single-file state dicts (``model.pt`` or ``model.safetensors``, ``optim.pt``) that ``torch.load`` reads on
one process. honing's own way to a usable model is ``honing export`` (a Hugging Face folder); this is the document's
form for scripts that expect OLMo-core's files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from honing import storage
from honing.errors import CheckpointError
from honing.train.checkpoint import Checkpointer
from honing.train.checkpoint_io import MODEL_AND_OPTIM_DIR, has_optimizer_state


def unshard_checkpoint(
    dir: Any,
    target_dir: Any,
    *,
    optim: bool | None = None,
    save_overwrite: bool = False,
    use_safetensors: bool = False,
) -> tuple[Path, Path | None]:
    """Write the local checkpoint ``dir``'s model state to ``target_dir/model.pt`` (``model.safetensors`` with
    ``use_safetensors``) and, when ``optim`` (None: when the checkpoint has it), its optimizer state to
    ``target_dir/optim.pt``; returns their paths (the second None without one). Files already there are
    refused unless ``save_overwrite``."""
    dir, target = str(dir), Path(target_dir)
    if storage.is_url(dir) or not Checkpointer.dir_is_checkpoint(dir):
        raise CheckpointError(f"{dir}: not a complete local checkpoint (a SAVE_FOLDER/stepN that a run finished)")
    model_dir = os.path.join(dir, MODEL_AND_OPTIM_DIR)
    optim = has_optimizer_state(model_dir) if optim is None else optim
    model_path = target / ("model.safetensors" if use_safetensors else "model.pt")
    optim_path = target / "optim.pt" if optim else None
    for path in (model_path, optim_path):
        if path is not None and path.exists() and not save_overwrite:
            raise FileExistsError(f"{path} exists; pass save_overwrite=True to replace it")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as scratch:
        whole = os.path.join(scratch, "whole.pt")
        dcp_to_torch_save(model_dir, whole)  # every shard gathered into one torch.save file, on this process
        state = torch.load(whole, weights_only=True)
    if optim and "optim" not in state:
        raise CheckpointError(f"{dir}: holds no optimizer state; pass optim=False (or None)")
    if use_safetensors:
        from safetensors.torch import save_file

        save_file({key: value.contiguous() for key, value in state["model"].items()}, str(model_path))
    else:
        torch.save(state["model"], model_path)
    if optim_path is not None:
        torch.save(state["optim"], optim_path)
    return model_path, optim_path
