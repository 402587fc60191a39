"""A batch's RGB images as channel-first uint8 tensors, converted together per size, for the image processor; and
Qwen-VL's patches of such stacks from the image processor's own steps, one call each per image size.

Given PIL images, transformers' image processors turn each one into a tensor alone (to RGB, to a NumPy array, to a
tensor, channels first, a contiguous copy: ~10 operators an image) before stacking the images of one size. Here
the images of one size become one array, one tensor and one channel-first copy: the same pixels (every image is RGB
already, so the processor's own conversion would change nothing). Handed to the processor as views of that stack:
39 operators instead of 59 for ``benchmarks/vl_sft_throughput.py``'s 8 strips a batch, ~0.2 of ~1.9 ms on one
thread.

A Qwen-VL image processor call then still checks its keywords, unstacks the images and stacks them again twice
(before and after resizing) and concatenates them one by one: ``qwen_patches`` runs its ``resize``,
``rescale_and_normalize`` and ``patchify`` on each stack directly (~1 of ~2.6 ms for the same 8 strips). Whoever
uses it checks its first result against the processor's call (``VLCollator``): the same numbers or not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

#: how the processor is told the converted tensors are laid out (a tensor's layout is otherwise guessed from its
#: shape, which is ambiguous for an image 3 or 4 pixels high)
CHANNELS_FIRST = {"input_data_format": "channels_first"}


class PatchingImageProcessor(Protocol):
    """What ``qwen_patches`` reads of a Qwen-VL image processor (transformers' torchvision backend)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int

    def resize(self, images: torch.Tensor, size: object, resample: object, factor: int) -> torch.Tensor: ...

    def rescale_and_normalize(self, images: torch.Tensor, *settings: object) -> torch.Tensor: ...

    def patchify(
        self, images: torch.Tensor, patch_size: int, merge_size: int, temporal_patch_size: int
    ) -> tuple[torch.Tensor, int, int]: ...


def size_stacks(images: Sequence[object]) -> list[tuple[list[int], torch.Tensor]] | None:
    """For each image size, the indices of ``images`` of that size and their ``[n, 3, height, width]`` uint8 stack;
    None when any image is not an RGB PIL image (the processor then converts them as it does: other modes differ)."""
    from PIL import Image

    if not images or not all(isinstance(image, Image.Image) and image.mode == "RGB" for image in images):
        return None
    by_size: dict[tuple[int, int], list[int]] = {}
    for index, image in enumerate(images):
        by_size.setdefault(image.size, []).append(index)  # type: ignore[attr-defined]
    stacks = []
    for indices in by_size.values():
        pixels = np.stack([np.asarray(images[index]) for index in indices])  # [n, height, width, 3]
        stacks.append((indices, torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()))
    return stacks


def channel_first_images(images: Sequence[object]) -> list[object] | None:
    """``images`` as ``[3, height, width]`` uint8 tensors in their order, views of one stack per image size; None
    when any of them is not an RGB PIL image."""
    stacks = size_stacks(images)
    if stacks is None:
        return None
    tensors: list[object] = list(images)
    for indices, stack in stacks:
        for index, tensor in zip(indices, stack.unbind(0)):
            tensors[index] = tensor
    return tensors


def qwen_patches(image_processor: PatchingImageProcessor, images: Sequence[object]) -> dict[str, torch.Tensor] | None:
    """``pixel_values`` and ``image_grid_thw`` of ``images`` (RGB PIL images) from the Qwen-VL image processor's own
    resize, rescale-and-normalize and patchify steps with its settings, in the images' order; None when the images
    are not all RGB or the processor has not these steps."""
    steps = ("resize", "rescale_and_normalize", "patchify", "do_resize", "size", "patch_size", "merge_size")
    stacks = size_stacks(images) if all(hasattr(image_processor, step) for step in steps) else None
    if stacks is None:
        return None
    from transformers.image_utils import SizeDict

    ip = image_processor
    size = SizeDict(**dict(ip.size))  # type: ignore[attr-defined]
    patches: list[torch.Tensor] = [torch.empty(0)] * len(images)
    grids: list[list[int]] = [[]] * len(images)
    for indices, stack in stacks:
        if ip.do_resize:  # type: ignore[attr-defined]
            stack = ip.resize(stack, size=size, resample=ip.resample, factor=ip.patch_size * ip.merge_size)  # type: ignore[attr-defined]
        stack = ip.rescale_and_normalize(
            stack,
            ip.do_rescale,
            ip.rescale_factor,
            ip.do_normalize,
            ip.image_mean,
            ip.image_std,  # type: ignore[attr-defined]
        )
        flat, grid_h, grid_w = ip.patchify(
            stack, patch_size=ip.patch_size, merge_size=ip.merge_size, temporal_patch_size=ip.temporal_patch_size
        )
        for index, image_patches in zip(indices, flat.unbind(0)):
            patches[index], grids[index] = image_patches, [1, grid_h, grid_w]
    pixel_values = flat.flatten(0, 1) if len(stacks) == 1 else torch.cat(patches)  # one size: already in order
    return {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids, dtype=torch.long)}
