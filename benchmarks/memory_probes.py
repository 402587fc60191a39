"""What a process reads of its own memory, for the benchmarks: resident and peak memory, exact bytes of training
state (DTensor shards counted by their local part) and of the activations autograd saves for backward."""

from __future__ import annotations

import ctypes
import re


def proc_status_bytes(field: str) -> int:
    """``field`` of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as handle:
        return int(re.search(rf"^{field}:\s+(\d+) kB", handle.read(), re.M).group(1)) * 1024


class DeviceMemory:
    """This process's memory on its device: resident memory on CPU, memory allocated by torch on CUDA."""

    def __init__(self, device):
        import torch

        self.cuda = torch.cuda if device.type == "cuda" else None

    def current(self) -> int:
        return self.cuda.memory_allocated() if self.cuda else proc_status_bytes("VmRSS")

    def peak(self) -> int:
        return self.cuda.max_memory_allocated() if self.cuda else proc_status_bytes("VmHWM")

    def reset_peak(self) -> None:
        """Start the peak again from the current figure; on CPU after giving the C allocator's free memory back,
        so that a step's growth is what it takes from the system, not what the previous step left cached."""
        if self.cuda:
            self.cuda.reset_peak_memory_stats()
            return
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass
        with open("/proc/self/clear_refs", "w") as handle:  # Linux: "5" resets VmHWM
            handle.write("5")


def local_part(tensor):
    """The tensor this rank holds: a DTensor's local shard, a plain tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages under ``tensors`` (views of one storage count once)."""
    sizes = {}
    for tensor in tensors:
        storage = local_part(tensor).untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
    return sum(sizes.values())


def state_bytes(model, optimizer) -> dict[str, int]:
    """This rank's bytes of parameters, gradients and optimizer states, and of all three for the experts."""
    import torch

    def optimizer_states(params):
        return [value for p in params for value in optimizer.state[p].values() if isinstance(value, torch.Tensor)]

    def grads(params):
        return [p.grad for p in params if p.grad is not None]

    params = list(model.parameters())
    experts = [p for name, p in model.named_parameters() if ".experts." in name]
    return {
        "param_bytes": storage_bytes(params),
        "grad_bytes": storage_bytes(grads(params)),
        "optimizer_bytes": storage_bytes(optimizer_states(params)),
        "expert_state_bytes": storage_bytes(experts)
        + storage_bytes(grads(experts))
        + storage_bytes(optimizer_states(experts)),
    }


class SavedActivations:
    """Counts the distinct storages autograd saves for backward while active; weights (leaves that require grad)
    and views of them are not activations and are left out."""

    def __init__(self):
        import torch

        self.sizes: dict[int, int] = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda saved: saved)

    def pack(self, tensor):
        root = tensor
        while root._base is not None:
            root = root._base
        if not (root.is_leaf and root.requires_grad):
            storage = local_part(tensor).untyped_storage()
            self.sizes[storage.data_ptr()] = storage.nbytes()
        # a detached alias: returning the tensor itself would tie a saved output to its own graph node (a cycle)
        return tensor.detach()

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def __enter__(self):
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
