"""Run by tests/optim/test_host_offload.py under torchrun (2 gloo ranks): a tiny Llama sharded by FSDP2, trained
by ``HostOffloadAdamW`` and by torch's AdamW; then a sharded checkpoint of the offloaded optimizer resumed. Writes
what the test checks as JSON to argv[1] (rank 0)."""

import json
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from honing.optim.host_offload import HostOffloadAdamW
from tests.helpers import tiny_llama


def sharded(seed=0):
    model = tiny_llama(seed=seed)
    mesh = init_device_mesh("cpu", (2,))
    for block in model.model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def train(model, optimizer, steps, seed):
    generator = torch.Generator().manual_seed(seed + dist.get_rank())  # each rank its own rows, as in training
    for _ in range(steps):
        ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=generator)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def full(model):
    return {name: p.full_tensor() for name, p in model.named_parameters()}


def main(out, folder):
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    found = {}
    reference, offloaded = sharded(), sharded()
    # the same single-tensor update in both (torch's for-loop kernel): equal bit for bit on the shards
    train(reference, torch.optim.AdamW(reference.parameters(), lr=1e-2, foreach=False, fused=False), 4, seed=0)
    optimizer = HostOffloadAdamW(offloaded.parameters(), lr=1e-2, fused=False)
    train(offloaded, optimizer, 4, seed=0)
    left, right = full(reference), full(offloaded)
    found["max_difference_to_adamw"] = max((left[n] - right[n]).abs().max().item() for n in left)
    state = get_optimizer_state_dict(offloaded, optimizer)["state"]
    found["states_sharded"] = all(
        isinstance(v, DTensor) and v.placements[0].is_shard()
        for s in state.values()
        for k, v in s.items()
        if k != "step"
    )

    # a sharded checkpoint after 4 steps, then 3 more steps straight on and from the checkpoint
    dcp.save(
        {"model": offloaded.state_dict(), "optim": get_optimizer_state_dict(offloaded, optimizer)}, checkpoint_id=folder
    )
    train(offloaded, optimizer, 3, seed=1)
    resumed = sharded(seed=5)  # other weights: the checkpoint must bring them
    resumed_optim = HostOffloadAdamW(resumed.parameters(), lr=1e-2, fused=False)
    loaded = {"model": resumed.state_dict(), "optim": get_optimizer_state_dict(resumed, resumed_optim)}
    dcp.load(loaded, checkpoint_id=folder)
    resumed.load_state_dict(loaded["model"])
    set_optimizer_state_dict(resumed, resumed_optim, loaded["optim"])
    train(resumed, resumed_optim, 3, seed=1)
    left, right = full(offloaded), full(resumed)
    found["max_difference_after_resume"] = max((left[n] - right[n]).abs().max().item() for n in left)
    if dist.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump(found, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
