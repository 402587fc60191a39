"""Qwen-VL's 3-D rope positions (M-RoPE) of a padded image batch, and its vision tower's patch positions, built
beside the image processor's grids.

The model computes them itself when given none (``get_rope_index``), walking every row token by token in Python
(``itertools.groupby`` over the token types, tensors per run): ~3 ms of a ~45 ms step for 8 rows of
benchmarks/vl_sft_throughput.py's tiny Qwen2-VL on one thread. Here the runs of image tokens are found with batched
ops and the images' grids are only listed, about an eighth of the time (8 rows of one image each, one process).
The positions equal ``get_rope_index``'s for still images (Qwen2-VL, Qwen2.5-VL and Qwen3-VL agree there; a test
checks each):

- text tokens count up by one from 0 over the row's real tokens;
- an image's tokens, starting at position ``p``, take ``p + (t, h, w)`` over its merged ``t x h/merge x w/merge``
  grid (temporal, height, width);
- the text after an image resumes at ``p + max(h, w) // merge``;
- padding tokens take 0.

The vision tower likewise loops over the images for its patches' (height, width) rotary positions
(``vision_utils.get_vision_position_ids``, the same in the three families); ``vision_rope_positions`` concatenates
one cached block per image size, which the model takes as ``image_position_ids``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


def image_rope_positions(
    image_tokens: torch.Tensor, attention_mask: torch.Tensor, grids: list[list[int]], merge_size: int
) -> torch.Tensor:
    """``[3, rows, width]`` positions of a batch whose real image tokens are ``image_tokens`` (bool, rows x width),
    its images' grids ``grids`` (``image_grid_thw`` as a list) in row order, as the model's ``get_rope_index`` gives
    them. Computed in NumPy on the collator's CPU tensors: the same integers as torch ops would give, each op a
    fraction of a torch op's fixed cost (~40 torch ops here cost ~0.4 ms for 8 rows on this project's 2-core
    machine)."""
    real = attention_mask.numpy().astype(bool)
    tokens = image_tokens.numpy()
    index = real.cumsum(1, dtype=np.int64) - 1  # each token's place among its row's real tokens
    # a run of image tokens starts where the flag rises and ends where it falls (one grid per run, in order)
    edges = np.diff(np.pad(tokens.astype(np.int8), ((0, 0), (1, 1))), axis=1)
    rows, starts = np.nonzero(edges == 1)
    stops = np.nonzero(edges == -1)[1]
    # after each image its row's later tokens move by (the positions it spans) - (its tokens)
    moves = np.array([max(h, w) // merge_size for _, h, w in grids], dtype=np.int64) - (stops - starts)
    shift = np.zeros((index.shape[0], index.shape[1] + 1), dtype=np.int64)
    np.add.at(shift, (rows, stops), moves)
    text = index + shift.cumsum(1)[:, :-1]
    positions = np.broadcast_to(text, (3, *text.shape)).copy()
    # image tokens: their image's first position plus its grid's offsets, in the row-major order of the grids
    offsets = np.concatenate([_grid_offsets(t, h // merge_size, w // merge_size) for t, h, w in grids], axis=1)
    positions[:, tokens] = offsets + np.repeat(text[rows, starts], stops - starts)
    positions[:, ~real] = 0
    return torch.from_numpy(positions)


@lru_cache(maxsize=64)
def _grid_offsets(frames: int, height: int, width: int) -> np.ndarray:
    """The temporal / height / width offsets of one image's merged grid, flattened as its tokens are."""
    grid = np.meshgrid(np.arange(frames), np.arange(height), np.arange(width), indexing="ij")
    return np.stack(grid).reshape(3, -1).astype(np.int64)


def vision_rope_positions(grids: list[list[int]], merge_size: int) -> torch.Tensor:
    """``[patches, 2]`` (height, width) rotary positions of the vision tower's patches, the images' (``grids``:
    ``image_grid_thw`` as a list) in order, as transformers' ``vision_utils.get_vision_position_ids`` gives them
    (passed as ``image_position_ids``, the tower skips its own per-image loop); one cached block per image size."""
    return torch.cat([_patch_positions(t, h, w, merge_size) for t, h, w in grids])


@lru_cache(maxsize=64)
def _patch_positions(frames: int, height: int, width: int, merge_size: int) -> torch.Tensor:
    """One image's patch positions, laid out block-major over its ``merge x merge`` blocks as the tower orders them."""
    rows, columns = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    blocks = (height // merge_size, merge_size, width // merge_size, merge_size)
    rows = rows.reshape(blocks).transpose(1, 2).flatten()
    columns = columns.reshape(blocks).transpose(1, 2).flatten()
    return torch.stack([rows, columns], dim=-1).repeat(frames, 1)
