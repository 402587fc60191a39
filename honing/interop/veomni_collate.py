"""VeOmni's ``build_data_collate_info`` dict, read as VeOmni defines it: batch key → ``(pack_dim, sp_slice,
sp_pad_value, sp_pad_scale)``, or a ``DataCollateInfo`` of those four.

The method's collator still makes the batch and cuts it into micro-batches; each micro-batch then has the keys the
dict names collated as VeOmni's ``PackingCollator`` and ``SequenceParallelCollator`` do:

- ``pack_dim``: the rows' features (each row's real tokens, its right padding dropped) concatenated along that
  dimension, ``torch.cat``; -1: along the last one and unsqueezed, so the micro-batch is one row holding its rows end
  to end. Each row's first label after the first is ignored (no row is trained to predict the next one). A key
  the dict does not name keeps the method's layout: rows stacked. Image fields, which honing's collators already
  concatenate along dimension 0, take ``pack_dim`` 0 only.
- ``sp_pad_value``: the value the key is padded with (None: not padded), to a multiple of ``sp_pad_scale`` times
  the sequence-parallel size along ``pack_dim``. honing's sequence-parallel size is ``parallel.cp``, which these
  dicts refuse above 1, so the multiple is ``sp_pad_scale``. VeOmni pads only under sequence parallelism: a scale
  above 1 on a key the model counts (``pixel_values``) changes what the model sees, here as there under SP.
- ``sp_slice``: whether the key is cut over sequence-parallel ranks. Without sequence parallelism (honing refuses
  ``parallel.cp`` above 1 with such a dict) nothing is cut, as in VeOmni.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from honing.data.collate import Collator
from honing.errors import ConfigError
from honing.losses import IGNORE_INDEX


@dataclass(frozen=True)
class DataCollateInfo:
    """VeOmni's per-key collate setting: the dimension rows are concatenated along (-1: the last, then one row), whether
    the key is cut over sequence-parallel ranks, and its padding's value and multiple (both None: not padded)."""

    pack_dim: int = 0
    sp_slice: bool = False
    sp_pad_value: float | None = None
    sp_pad_scale: int | None = 1

    def __post_init__(self):
        # VeOmni's own checks, as ValueErrors the recipe turns into one line naming the key
        if self.sp_slice and (self.sp_pad_value is None or self.sp_pad_scale is None):
            raise ValueError("sp_pad_value and sp_pad_scale must be given when sp_slice is True")
        if (self.sp_pad_value is None) != (self.sp_pad_scale is None):
            raise ValueError("sp_pad_value and sp_pad_scale are given together or both None")
        if self.sp_pad_scale is not None and self.sp_pad_scale < 1:
            raise ValueError(f"sp_pad_scale must be >= 1, got {self.sp_pad_scale}")


def collate_infos(info: Mapping[str, Any], owner: str) -> dict[str, DataCollateInfo]:
    """``build_data_collate_info``'s dict as ``DataCollateInfo``s; a bad entry is a ConfigError naming ``owner``'s
    key."""
    infos: dict[str, DataCollateInfo] = {}
    for key, value in info.items():
        try:
            if isinstance(value, DataCollateInfo):
                infos[key] = value
            elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 4:
                infos[key] = DataCollateInfo(*value)
            else:
                raise ValueError(f"expected (pack_dim, sp_slice, sp_pad_value, sp_pad_scale), got {value!r}")
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{owner}: key {key!r}: {error}") from None
    return infos


class CollateInfoCollator(Collator):
    """The method's collator, with VeOmni's per-key settings applied to every micro-batch it cuts."""

    def __init__(self, base: Collator, infos: Mapping[str, DataCollateInfo], *, owner: str, sp_size: int = 1):
        self.base = base
        self.infos = dict(infos)
        self.owner = owner  # named by the errors
        self.sp_size = sp_size
        self.model_input_keys = base.model_input_keys

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The method's batch of ``items``."""
        return self.base(items)

    def num_rows(self, batch: Mapping[str, Any]) -> int:
        """The method's row count."""
        return self.base.num_rows(batch)

    def num_tokens(self, batch: Mapping[str, Any]) -> int:
        """The method's real-token count."""
        return self.base.num_tokens(batch)

    def filler(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The method's filler batch."""
        return self.base.filler(batch)

    def model_inputs(self, micro_batch: Mapping[str, Any]) -> dict[str, Any]:
        """The method's model inputs."""
        return self.base.model_inputs(micro_batch)

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """The method's micro-batches, each collated by the dict."""
        return [self.collate(micro) for micro in self.base.split(batch, rows_per_micro_batch)]

    def collate(self, micro: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One micro-batch with each key the dict names concatenated (and padded) as it says."""
        rows, width = micro["input_ids"].shape[:2]
        lengths = micro.get("num_real_tokens")
        token_keys = {
            key for key, value in micro.items() if value.dim() >= 2 and tuple(value.shape[:2]) == (rows, width)
        }
        packed = [key for key in token_keys if key in self.infos and self.infos[key].pack_dim == -1]
        left = sorted(token_keys - set(self.infos))
        if packed and left:
            raise ConfigError(
                f"{self.owner}: {', '.join(sorted(packed))} laid end to end (pack_dim -1) but the batch's other "
                f"per-token key(s) {', '.join(left)} not: give every per-token key a collate info"
            )
        out = dict(micro)
        for key, info in self.infos.items():
            if key not in micro:
                continue
            value = micro[key]
            if key in token_keys:
                features = [
                    value[row, : int(lengths[row])] if lengths is not None else value[row] for row in range(rows)
                ]
                if key == "labels":  # as VeOmni's: a packed sequence's rows never predict across their boundary
                    features = [f if i == 0 else ignore_first(f) for i, f in enumerate(features)]
                value = torch.cat(features, dim=info.pack_dim)
                value = value.unsqueeze(0) if info.pack_dim == -1 else value
            elif info.pack_dim != 0:
                raise ConfigError(
                    f"{self.owner}: key {key!r}: pack_dim {info.pack_dim} on a field honing already concatenates "
                    "along dimension 0 (image fields); give 0"
                )
            out[key] = padded(value, info, self.sp_size)
        return out


def ignore_first(labels: torch.Tensor) -> torch.Tensor:
    """``labels`` with its first position ignored."""
    labels = labels.clone()
    labels[..., 0] = IGNORE_INDEX
    return labels


def padded(value: torch.Tensor, info: DataCollateInfo, sp_size: int) -> torch.Tensor:
    """``value`` padded with ``info.sp_pad_value`` along its pack dimension to a multiple of ``sp_pad_scale`` times
    the sequence-parallel size (as is, without a pad value)."""
    if info.sp_pad_value is None or info.sp_pad_scale is None:
        return value
    multiple = info.sp_pad_scale * sp_size
    missing = -value.shape[info.pack_dim] % multiple
    if not missing:
        return value
    shape = list(value.shape)
    shape[info.pack_dim] = missing
    pad = torch.full(shape, info.sp_pad_value, dtype=value.dtype, device=value.device)
    return torch.cat([value, pad], dim=info.pack_dim)


def collator_from_info(info: Mapping[str, Any], base: Collator, *, owner: str, sp_size: int) -> Collator:
    """The collator for a ``build_data_collate_info`` dict over the method's collator ``base``; ``sp_size``
    (``parallel.cp``) above 1 is refused in one line."""
    if sp_size > 1:
        raise ConfigError(
            f"{owner}: a dict of per-key collate settings with parallel.cp={sp_size}: honing's context parallelism "
            "cuts rows itself (honing.methods.sequence_split); use parallel.cp=1 or return a Collator"
        )
    return CollateInfoCollator(base, collate_infos(info, owner), owner=owner, sp_size=sp_size)
