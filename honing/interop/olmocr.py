"""olmOCR's training API (``olmocr/train/train.py``) by its names: ``get_rank()``, ``CheckpointUploadCallback(save_path,
logger=None)`` (a ``transformers.TrainerCallback``), ``update_wandb_config(config, trainer, model)`` and
``model_type_from_name``. ``run_train(config)`` is ``honing train CONFIG`` (``honing.interop.configs.olmocr``)."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from transformers import TrainerCallback

from honing import storage
from honing.distributed import get_rank
from honing.errors import ConfigError
from honing.train.checkpoint import MARKER
from honing.train.remote import Uploader

__all__ = ["CheckpointUploadCallback", "get_rank", "model_type_from_name", "update_wandb_config"]


class CheckpointUploadCallback(TrainerCallback):
    """olmOCR's callback for transformers' ``Trainer``: at each save, copies the newest ``checkpoint-N`` folder of
    ``args.output_dir`` to ``save_path/checkpoint-N`` (a local folder or ``s3://...``), on the main process only."""

    def __init__(self, save_path: str, logger: logging.Logger | None = None):
        self.save_path = save_path
        self.logger = logger or logging.getLogger(type(self).__name__)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Copy the latest checkpoint to the save path (waits until every file has arrived)."""
        from transformers.trainer_utils import get_last_checkpoint

        if not state.is_local_process_zero:
            return
        latest = get_last_checkpoint(args.output_dir)
        if not latest:
            return
        target = storage.join(self.save_path, os.path.basename(latest))
        uploader = Uploader(None)
        uploader.upload_folder(latest, target, marker=MARKER)
        uploader.wait()
        self.logger.info("Saved checkpoint to %s", target)


def update_wandb_config(config: Any, trainer: Any, model: Any) -> None:
    """olmOCR's ``update_wandb_config``: the run's W&B config gets ``peft`` (the model's adapter configs) and
    ``script`` (the training config); ``trainer`` is transformers' (its ``WandbCallback``) or honing's (its W&B
    callback). Raises ValueError without a W&B callback, as olmOCR does."""
    run = _wandb_run(trainer)
    peft = {name: _native(value) for name, value in (getattr(model, "peft_config", None) or {}).items()}
    run.config.update({"peft": peft}, allow_val_change=True)
    run.config.update({"script": _native(config)}, allow_val_change=True)


def model_type_from_name(name_or_path: str) -> str:
    """olmOCR's choice of model class by name: ``qwen2_vl`` when ``qwen`` is in it, ``molmo`` when ``molmo`` is."""
    lowered = name_or_path.lower()
    if "qwen" in lowered:
        return "qwen2_vl"
    if "molmo" in lowered:
        return "molmo"
    raise ConfigError(f"model.name_or_path: {name_or_path!r} names neither qwen nor molmo (olmOCR's two models)")


def _wandb_run(trainer: Any) -> Any:
    """The W&B run of transformers' ``WandbCallback`` or of honing's W&B callback in ``trainer``."""
    handler = getattr(trainer, "callback_handler", None)
    if handler is not None:  # transformers' Trainer
        for callback in handler.callbacks:
            if type(callback).__name__ == "WandbCallback" and getattr(callback, "_wandb", None) is not None:
                if getattr(callback, "_initialized", True) and callback._wandb.run is not None:
                    return callback._wandb.run
    callbacks = getattr(trainer, "callbacks", None)  # honing's Trainer: name -> callback
    for callback in callbacks.values() if isinstance(callbacks, dict) else ():
        if type(callback).__name__ == "WandbCallback" and getattr(callback, "run", None) is not None:
            return callback.run
    raise ValueError("WandbCallback not found in trainer callbacks")


def _native(value: Any) -> Any:
    """``value`` as plain dicts, lists and scalars (dataclasses, pydantic models, sets, enums)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif hasattr(value, "model_dump"):
        value = value.model_dump()
    elif hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {str(key): _native(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_native(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
