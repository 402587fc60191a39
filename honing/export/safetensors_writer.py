"""Write safetensors shards one tensor at a time: the files' headers are laid out first, from each tensor's name,
dtype and shape, so no shard is ever held in memory whole (``safetensors.torch.save_file`` takes a dict of them)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import torch

#: safetensors' names for torch's dtypes
DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
HEADER_ALIGNMENT = 8  # safetensors pads its JSON header with spaces so the data starts 8-byte aligned


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor will be, before it exists: its name in the file, dtype and shape."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        count = 1
        for size in self.shape:
            count *= size
        return count * torch.empty((), dtype=self.dtype).element_size()


def shard_layout(specs: Sequence[TensorSpec], max_shard_bytes: int) -> list[list[TensorSpec]]:
    """``specs`` in order, cut into shards of at most ``max_shard_bytes`` (a larger tensor gets a shard alone)."""
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if shards[-1] and size + spec.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += spec.nbytes
    return shards


def shard_names(count: int) -> list[str]:
    """The file names transformers gives ``count`` shards."""
    if count == 1:
        return [SINGLE_FILE]
    return [f"model-{index:05d}-of-{count:05d}.safetensors" for index in range(1, count + 1)]


def header_bytes(specs: Sequence[TensorSpec], metadata: dict[str, str]) -> bytes:
    """A shard's header: its length (8 bytes, little-endian) and the JSON that places each tensor's data."""
    entries: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for spec in specs:
        if spec.dtype not in DTYPE_NAMES:
            raise ValueError(f"safetensors has no dtype for {spec.name}: {spec.dtype}")
        entries[spec.name] = {
            "dtype": DTYPE_NAMES[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % HEADER_ALIGNMENT)
    return struct.pack("<Q", len(text)) + text


class ShardedWriter:
    """Writes the tensors of ``specs`` to ``folder`` in that order, each as it comes (``write``), then the index.

    A tensor that differs from its spec (name, dtype or shape) is refused: the header already promised it."""

    def __init__(
        self, folder: str, specs: Sequence[TensorSpec], *, max_shard_bytes: int, metadata: dict[str, str] | None = None
    ):
        self.folder = folder
        self.shards = shard_layout(specs, max_shard_bytes)
        self.names = shard_names(len(self.shards))
        self.metadata = {"format": "pt", **(metadata or {})}
        self.total_bytes = sum(spec.nbytes for spec in specs)
        self._shard = -1
        self._position = 0
        self._file: BinaryIO | None = None

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Append the next tensor's data (on any device; copied to the host one tensor at a time)."""
        while self._file is None or self._position == len(self.shards[self._shard]):
            self._next_shard()
        spec = self.shards[self._shard][self._position]
        got = TensorSpec(name, tensor.dtype, tuple(tensor.shape))
        if got != spec:
            raise RuntimeError(f"streamed export: expected {spec}, got {got}")
        data = tensor.detach().to("cpu").contiguous()
        if data.numel():
            self._file.write(data.reshape(-1).view(torch.uint8).numpy().data)
        self._position += 1

    def close(self) -> None:
        """Finish the last shard and write the index (when there are several)."""
        while self._shard < len(self.shards) - 1:  # shards of no tensors (an empty model) still exist
            self._next_shard()
        if self._file is not None:
            self._finish_file()
        if len(self.shards) > 1:
            weight_map = {spec.name: file for file, shard in zip(self.names, self.shards) for spec in shard}
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
            with open(os.path.join(self.folder, INDEX_FILE), "w", encoding="utf-8") as handle:
                handle.write(json.dumps(index, indent=2, sort_keys=True) + "\n")

    def _next_shard(self) -> None:
        if self._file is not None:
            self._finish_file()
        self._shard += 1
        if self._shard >= len(self.shards):
            raise RuntimeError("streamed export: more tensors than the header lists")
        self._file = open(os.path.join(self.folder, self.names[self._shard]), "wb")  # noqa: SIM115 (closed later)
        self._file.write(header_bytes(self.shards[self._shard], self.metadata))
        self._position = 0

    def _finish_file(self) -> None:
        assert self._file is not None
        if self._position != len(self.shards[self._shard]):
            missing = [spec.name for spec in self.shards[self._shard][self._position :]]
            raise RuntimeError(f"streamed export: {len(missing)} tensors never came, e.g. {missing[:3]}")
        self._file.close()
        self._file = None
