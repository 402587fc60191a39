"""The Trainer's arguments checked and its settings read: the device and data-parallel group OLMo-core's fields
name, the warm-start settings, the trainer-section settings that are Trainer attributes, and the FLOPs per token
the loop counts petaflops with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from honing.config.schema import TrainerSection
from honing.distributed import default_device, get_world_size, is_distributed
from honing.errors import ConfigError

if TYPE_CHECKING:
    from honing.train.trainer import Trainer


def module_device(train_module: object) -> torch.device | None:
    """The device ``train_module`` trains on: its ``device``, else its model's first parameter's (None: unknown)."""
    device = getattr(train_module, "device", None)
    if device is not None:
        return torch.device(device)
    model = getattr(train_module, "model", None)
    if isinstance(model, torch.nn.Module):
        for parameter in model.parameters():
            return parameter.device
    return None


def check_device(train_module: object, device: torch.device | str | None) -> torch.device:
    """The device the Trainer reports (OLMo-core's field): the given one, which must be of the train module's kind,
    else the train module's, else the default."""
    trains_on = module_device(train_module)
    if device is None:
        return trains_on or default_device()
    device = torch.device(device)
    if trains_on is not None and trains_on.type != device.type:
        raise ConfigError(
            f"device: {device} was given, but the train module's model is on {trains_on}; move the model "
            "there first, or leave device unset"
        )
    return device


def check_dp_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """OLMo-core's ``dp_process_group``: None or a group of every rank (a smaller one is refused in one line)."""
    if group is not None and is_distributed() and dist.get_world_size(group) != get_world_size():
        raise ConfigError(
            f"dp_process_group: a group of {dist.get_world_size(group)} of the {get_world_size()} ranks is not "
            "supported (the Trainer reduces metrics and exchanges cancels over every rank; a train module's "
            "data-parallel ranks come from its ParallelDims); leave it unset"
        )
    return group


def model_flops_per_token(train_module: object, data_loader: object) -> float | None:
    """The train module's FLOPs per token at the data's sequence length (the loader's ``seq_len``, else its rows'
    ``tokens_per_row``), when both are known."""
    rows = getattr(data_loader, "dataset", None)
    seq_len = getattr(data_loader, "seq_len", None) or getattr(rows, "tokens_per_row", None)
    flops = getattr(train_module, "num_flops_per_token", None)
    return flops(seq_len) if seq_len and flops is not None else None


def replace_settings(trainer: Trainer, **settings: object) -> None:
    """Set trainer-section settings on a built trainer: a copy of its config with them, given to the trainer and to
    its checkpoints, which read the load settings."""
    trainer.config = trainer.checkpoints.config = trainer.config.model_copy(update=settings)


class TrainerSetting:
    """A setting of the trainer section as an attribute of the Trainer (OLMo-core's Trainer fields): read from
    ``trainer.config``, and set by replacing the config with a copy holding the new value."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: Trainer | None, owner: type | None = None) -> object:
        return self if trainer is None else getattr(trainer.config, self.name)

    def __set__(self, trainer: Trainer, value: object) -> None:
        replace_settings(trainer, **{self.name: value})


def check_warm_start(config: TrainerSection) -> None:
    """``load_trainer_state`` / ``load_optim_state`` say what ``load_path``'s checkpoint restores: set without it
    they would change nothing, so they are refused (one line naming the key). A section whose class says these
    settings apply to every load (``LOAD_SETTINGS_APPLY_TO_RESUME``) takes them without ``load_path``."""
    if getattr(type(config), "LOAD_SETTINGS_APPLY_TO_RESUME", False):
        return
    for key in ("load_trainer_state", "load_optim_state"):
        if config.load_path is None and getattr(config, key) != type(config).model_fields[key].default:
            raise ConfigError(
                f"trainer.{key}: says what the checkpoint of trainer.load_path restores, and trainer.load_path is "
                f"not set; set it, or remove trainer.{key}"
            )
