"""The lazy reference's per-row store (``<method>.reference: lazy``): each row's reference log-probs, keyed by the
row's tokens, kept from the first time a batch held the row, in memory and appended to a file on disk so that later
epochs, later runs of the same model and resumed runs read them instead of running the reference again."""

from __future__ import annotations

import glob
import hashlib
import os

import numpy as np
import torch

#: one record: the row's key (a 16-byte hash of its tokens), then its chosen and rejected log-probs
RECORD = np.dtype([("key", "V16"), ("chosen", "<f8"), ("rejected", "<f8")])


def row_keys(batch: dict[str, torch.Tensor]) -> list[bytes]:
    """A 16-byte key per row of a pair batch: a hash of its segment lengths and its real tokens (what its reference
    log-probs depend on, whatever the batch or the split it sits in)."""
    input_ids, segments = batch["input_ids"].cpu(), batch["segments"].cpu().to(torch.int64)
    lengths = segments.sum(1).tolist()
    keys = []
    for row, length in enumerate(lengths):
        digest = hashlib.blake2b(segments[row].numpy().tobytes(), digest_size=16)
        digest.update(input_ids[row, :length].to(torch.int64).numpy().tobytes())
        keys.append(digest.digest())
    return keys


class ReferenceCache:
    """Reference log-probs by row key; ``folder``: where records are appended (one file per rank, all read back),
    None: in memory only. The first value stored for a key stays: a row's reference is the same in every epoch."""

    def __init__(self, folder: str | None = None, *, rank: int = 0):
        self.folder, self.rank = folder, rank
        self.values: dict[bytes, tuple[float, float]] = {}
        if folder is not None:
            for path in sorted(glob.glob(os.path.join(folder, "rows-*.bin"))):
                self._read(path)

    def __len__(self) -> int:
        return len(self.values)

    def _read(self, path: str) -> None:
        data = np.fromfile(path, dtype=np.uint8)
        whole = len(data) - len(data) % RECORD.itemsize  # a record cut short by a killed run is dropped
        for record in data[:whole].view(RECORD):
            self.values.setdefault(bytes(record["key"]), (float(record["chosen"]), float(record["rejected"])))

    def lookup(self, keys: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        """The chosen and rejected log-probs (float64) of each key; NaN where none is stored."""
        found = [self.values.get(key, (float("nan"), float("nan"))) for key in keys]
        values = torch.tensor(found, dtype=torch.float64).reshape(len(keys), 2)
        return values[:, 0], values[:, 1]

    def store(self, keys: list[bytes], chosen: torch.Tensor, rejected: torch.Tensor) -> None:
        """Keep each new key's values (a key already stored keeps its first ones) and append them to this rank's
        file."""
        chosen_values, rejected_values = chosen.double().cpu().tolist(), rejected.double().cpu().tolist()
        fresh = [(k, c, r) for k, c, r in zip(keys, chosen_values, rejected_values) if k not in self.values]
        for key, value_chosen, value_rejected in fresh:
            self.values.setdefault(key, (value_chosen, value_rejected))
        if self.folder is None or not fresh:
            return
        new = np.array(fresh, dtype=RECORD)
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, f"rows-{self.rank}.bin"), "ab") as handle:
            handle.write(new.tobytes())
