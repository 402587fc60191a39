"""Pretraining rows read from prepared token shards (``format: tokens``): memory-mapped, mixed by weight.

Each prepared folder is cut into non-overlapping rows of ``seq_len`` tokens inside each shard (a shard's tail
shorter than a row is dropped). Several folders mix by ``weight`` exactly as text sources do: whole copies of
a source's rows, then a seeded fraction of them, so an epoch visits each row ``weight`` times at most (once
for weights up to 1). The order, resumption and rank slices are the ``DataLoader``'s: it permutes these
indices per epoch from (seed, epoch) and keeps its position in checkpoints. Nothing here holds the corpus:
only per-shard row counts and, for fractional weights, the sorted indices of the chosen rows of a window of up
to ``HELD_ROWS`` rows; a larger window's chosen rows are the first of a ``SeededPermutation`` of them, computed
row by row.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from honing.data.permutation import HELD_ROWS, SeededPermutation
from honing.data.text.document_mask import mask_documents
from honing.data.text.token_shards import HEADER_BYTES, TokenIndex, local_folder, open_shard, read_index
from honing.errors import DataError


class TokenSource:
    """One prepared folder, its shards memory-mapped and cut into rows of ``seq_len`` tokens.

    A row's tokens are read from the shard file (``read``), not through the memory map: the kernel maps a whole
    page-cache folio on a fault (up to megabytes on a file just written, whatever ``madvise`` says), so rows read
    through the map at random would make the process's resident size grow with the corpus."""

    def __init__(self, folder: str, seq_len: int, *, cache_dir: str):
        if seq_len < 1:
            raise DataError(f"seq_len must be >= 1, got {seq_len}")
        self.folder = folder
        self.seq_len = seq_len
        local = local_folder(folder, cache_dir)
        self.index: TokenIndex = read_index(local)
        self.tokens: list[np.ndarray] = []
        self.doc_starts: list[np.ndarray] = []
        self.paths = [os.path.join(local, shard.file) for shard in self.index.shards]
        self._files: dict[int, int] = {}  # shard → a descriptor opened at its first read
        for shard, path in zip(self.index.shards, self.paths):
            tokens, starts = open_shard(path)
            if len(tokens) != shard.tokens or len(starts) != shard.documents:
                raise DataError(
                    f"{folder}/{shard.file}: holds {len(tokens)} tokens and {len(starts)} documents, its index "
                    f"says {shard.tokens} and {shard.documents}; run `honing prepare` again"
                )
            self.tokens.append(tokens)
            self.doc_starts.append(starts)
        rows = [len(tokens) // seq_len for tokens in self.tokens]
        self.row_offsets = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)]).astype(np.int64)

    @property
    def num_rows(self) -> int:
        """Rows of ``seq_len`` over every shard."""
        return int(self.row_offsets[-1])

    def row(self, row: int) -> tuple[np.ndarray, int, int]:
        """``(shard's tokens, shard index, offset)`` locating row ``row``."""
        shard = int(np.searchsorted(self.row_offsets, row, side="right")) - 1
        return self.tokens[shard], shard, int(row - self.row_offsets[shard]) * self.seq_len

    def read(self, row: int) -> np.ndarray:
        """Row ``row``'s ``seq_len`` tokens, read from its shard file."""
        tokens, shard, start = self.row(row)
        if shard not in self._files:
            self._files[shard] = os.open(self.paths[shard], os.O_RDONLY)
        itemsize = tokens.dtype.itemsize
        data = os.pread(self._files[shard], self.seq_len * itemsize, HEADER_BYTES + start * itemsize)
        return np.frombuffer(data, dtype=tokens.dtype)

    def __getstate__(self) -> dict:
        # descriptors do not cross into a spawned process: it opens its own
        return {**self.__dict__, "_files": {}}

    def __del__(self) -> None:
        for descriptor in getattr(self, "_files", {}).values():
            os.close(descriptor)

    def document_lengths(self, row: int) -> list[int]:
        """Lengths of the document pieces inside row ``row``, in order; they sum to ``seq_len``."""
        _, shard, start = self.row(row)
        end = start + self.seq_len
        starts = self.doc_starts[shard]
        inside = starts[np.searchsorted(starts, start, side="right") : np.searchsorted(starts, end, side="left")]
        return np.diff(np.concatenate([[start], inside, [end]])).tolist()


@dataclass
class RowWindow:
    """Rows ``start..stop`` of a source, taken ``weight`` times per epoch."""

    source: TokenSource
    start: int
    stop: int
    weight: float = 1.0

    @property
    def count(self) -> int:
        """Rows in the window."""
        return self.stop - self.start


def split_windows(source: TokenSource, validation_fraction: float, weight: float) -> tuple[RowWindow, RowWindow | None]:
    """Training and validation windows of a source: the validation rows are its last ``validation_fraction``
    (at least one row, if any is asked for), so they never overlap the training rows."""
    if validation_fraction <= 0:
        return RowWindow(source, 0, source.num_rows, weight), None
    held_out = min(max(1, round(validation_fraction * source.num_rows)), source.num_rows - 1)
    cut = source.num_rows - held_out
    return RowWindow(source, 0, cut, weight), RowWindow(source, cut, source.num_rows, 1.0)


class TokenRows(torch.utils.data.Dataset):
    """Rows of several windows over prepared folders, mixed by weight; item ``i`` is a pure function of ``i``."""

    def __init__(self, windows: Sequence[RowWindow], *, seed: int = 0, document_masking: bool = False):
        if not windows:
            raise DataError("no format: tokens sources to read")
        self.windows = list(windows)
        self.seq_len = self.windows[0].source.seq_len
        self.document_masking = document_masking
        self._whole: list[int] = []
        self._picks: list[np.ndarray | SeededPermutation] = []
        lengths = []
        for number, window in enumerate(self.windows):
            whole, fraction = divmod(window.weight, 1.0)
            chosen = round(fraction * window.count)
            # Seeded by (seed, source number), as text sources are: adding a source leaves earlier picks alone.
            if window.count > HELD_ROWS and chosen:
                self._picks.append(SeededPermutation(window.count, [seed, number]))
            else:
                picks = np.random.default_rng([seed, number]).choice(window.count, size=chosen, replace=False)
                self._picks.append(np.sort(picks).astype(np.int64))
            self._whole.append(int(whole))
            lengths.append(int(whole) * window.count + chosen)
        self._offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        if self._offsets[-1] == 0:
            raise DataError(
                f"the format: tokens sources hold no row of seq_len={self.seq_len} tokens "
                f"({', '.join(w.source.folder for w in self.windows)}); prepare more text or lower data.seq_len"
            )

    def __len__(self) -> int:
        return int(self._offsets[-1])

    @property
    def tokens_per_row(self) -> int:
        """Every row is full, so each one holds exactly ``seq_len`` tokens."""
        return self.seq_len

    @property
    def num_tokens(self) -> int:
        """Tokens served per epoch."""
        return len(self) * self.seq_len

    def source_of(self, index: int) -> tuple[int, int]:
        """``(window number, row in that window's source)`` of item ``index``."""
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} out of range for a dataset of {len(self)} rows")
        number = int(np.searchsorted(self._offsets, index, side="right")) - 1
        window, within = self.windows[number], index - int(self._offsets[number])
        copies, picks = self._whole[number] * window.count, self._picks[number]
        if within < copies:
            local = within % window.count
        else:
            local = picks.at(within - copies) if isinstance(picks, SeededPermutation) else int(picks[within - copies])
        return number, window.start + local

    def document_lengths(self, index: int) -> list[int]:
        """Lengths of the document pieces inside item ``index``."""
        number, row = self.source_of(index)
        return self.windows[number].source.document_lengths(row)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        number, row = self.source_of(index)
        source = self.windows[number].source
        ids = torch.from_numpy(source.read(row).astype(np.int64))
        # The HF model shifts labels itself; a copy keeps in-place label masking from touching inputs.
        item = {"input_ids": ids, "labels": ids.clone()}
        return mask_documents(item, source.document_lengths(row)) if self.document_masking else item
