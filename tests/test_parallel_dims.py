"""The mesh's dimensions: sizes derived from the config, and layouts that cannot fit refused in one line."""

import pytest

from honing.errors import ConfigError
from honing.parallel_dims import ParallelDims, check_divides


def test_dp_shard_takes_what_the_other_dimensions_leave():
    dims = ParallelDims(tp=2, world_size=8)
    assert (dims.dp_replicate, dims.dp_shard, dims.ep, dims.cp, dims.tp) == (1, 4, 1, 1, 2)
    assert dims.dp_size == 4  # tensor-parallel ranks read the same batch
    assert dims.grad_divisor == 4
    assert dims.describe() == "dp_shard=4 × tp=2"


def test_sizes_of_a_composed_layout():
    dims = ParallelDims(dp_replicate=2, dp_shard=2, cp=2, world_size=8)
    assert dims.dp_size == 4  # sequence-parallel ranks read the same batch, cut it in slices
    assert dims.fsdp_size == 4  # FSDP2 shards over dp_shard × cp
    assert dims.grad_divisor == 8  # every rank holds other tokens
    expert = ParallelDims(ep=2, world_size=4)
    assert (expert.dp_shard, expert.dp_size, expert.fsdp_size) == (2, 4, 4)  # ep ranks read their own batches


def test_one_process_is_every_dimension_one():
    dims = ParallelDims()
    assert (dims.dp_shard, dims.dp_size, dims.grad_divisor) == (1, 1, 1)
    assert dims.describe() == "1 process"
    assert dims.local_rank("tp") == 0 and dims.group("dp") is None and dims.build_mesh("cpu") is None


@pytest.mark.parametrize(
    "sizes, message",
    [
        (dict(tp=2, dp_shard=3, world_size=4), "dp_replicate × dp_shard × ep × cp × tp = dp_replicate=1 × dp_shard=3"),
        (dict(tp=3, world_size=4), "does not divide the world size (4 processes)"),
        (dict(cp=0, world_size=4), "parallel.cp: expected an integer >= 1, got 0"),
        (dict(dp_shard=0, world_size=4), "parallel.dp_shard: expected an integer >= 1, got 0"),
    ],
)
def test_layouts_that_cannot_fit_are_refused(sizes, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ParallelDims(**sizes)


def test_check_divides_names_the_key_and_the_value():
    check_divides("data.seq_len", 64, "cp", 2)
    with pytest.raises(ConfigError, match=r"parallel.cp=3 must divide data.seq_len \(64\)"):
        check_divides("data.seq_len", 64, "cp", 3)
