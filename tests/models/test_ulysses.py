"""Ulysses attention (honing/models/ulysses.py) and the row split (honing/methods/sequence_split.py): on 2 gloo
ranks a tiny Llama's logits, loss and gradients equal those of whole rows; the split's targets, positions and
refusals by hand."""

import json
from pathlib import Path

import pytest
import torch

from honing.errors import ConfigError
from honing.losses import IGNORE_INDEX
from honing.methods.sequence_split import split_rows
from honing.models.ulysses import check_context_parallel
from honing.parallel_dims import ParallelDims
from tests.helpers import torchrun_script

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_ranks_attend_like_whole_rows(tmp_path):
    out = tmp_path / "differences.json"
    result = torchrun_script(REPO / "tests/models/ulysses_worker.py", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    differences = json.loads(out.read_text())
    # sdpa and eager, 4 or 1 key/value heads, plain / packed / padded rows; the all-to-alls alone (exact moves)
    assert len(differences) == 13 and differences["exchanges"]["logits"] == 0.0
    for case, found in differences.items():
        assert found["logits"] < 1e-6 and found["grads"] < 1e-6, (case, found)
        assert found["loss"] < 1e-6 * found["loss_value"], (case, found)


def test_split_shifts_targets_on_the_whole_row_and_keeps_global_positions():
    labels = torch.tensor([[10, 11, IGNORE_INDEX, 13, 14, 15]])
    micro = {"input_ids": torch.arange(6)[None], "labels": labels, "num_real_tokens": torch.tensor([6])}
    first, second = (split_rows(micro, rank, 2) for rank in (0, 1))
    # the last token of rank 0's slice predicts the first of rank 1's
    assert first["targets"].tolist() == [[11, IGNORE_INDEX, 13]]
    assert second["targets"].tolist() == [[14, 15, IGNORE_INDEX]]
    assert second["input_ids"].tolist() == [[3, 4, 5]] and second["position_ids"].tolist() == [[3, 4, 5]]
    assert second["row_position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert second["num_real_tokens"].tolist() == [6] and "labels" not in second


def test_split_keeps_documents_positions_and_pads_a_row_cp_does_not_divide():
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    micro = {"input_ids": torch.arange(5)[None], "labels": torch.arange(5)[None], "position_ids": positions}
    second = split_rows(micro, 1, 2)
    # a sixth token of padding continues the last document, its target ignored
    assert second["position_ids"].tolist() == [[0, 1, 2]]
    assert second["targets"].tolist() == [[4, IGNORE_INDEX, IGNORE_INDEX]]
    assert second["row_position_ids"].tolist() == [[0, 1, 2, 0, 1, 2]]


def test_split_refuses_per_token_keys_it_cannot_cut():
    micro = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.zeros(1, 4, dtype=torch.long)}
    with pytest.raises(ValueError, match="'token_type_ids'"):
        split_rows({**micro, "token_type_ids": torch.zeros(1, 4)}, 0, 2)


def test_layouts_ulysses_cannot_split_are_refused_in_one_line():
    from transformers import LlamaConfig, MistralConfig

    dims = ParallelDims(dp_shard=1, cp=4, world_size=4)
    with pytest.raises(ConfigError, match=r"parallel.cp=4 must divide the model's attention heads \(6\)"):
        check_context_parallel(LlamaConfig(hidden_size=48, num_attention_heads=6), dims)
    with pytest.raises(ConfigError, match=r"parallel.cp=4 must divide data.seq_len \(30\)"):
        check_context_parallel(LlamaConfig(num_attention_heads=8), dims, 30)
    mistral = MistralConfig(num_attention_heads=8, sliding_window=16)
    with pytest.raises(ConfigError, match="sliding-window attention"):
        check_context_parallel(mistral, dims, 32)
    check_context_parallel(mistral, dims, 16)  # a window as long as the rows masks nothing more
    check_context_parallel(mistral, dims)  # no row length yet: the attention refuses longer rows when it sees them


def test_methods_that_cannot_split_rows_are_refused_at_build_time():
    from honing.data.collate import stack_collate
    from honing.methods.dpo import DPOTrainModule
    from honing.methods.lm import LMTrainModule
    from tests.helpers import tiny_llama

    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters())
    dims = ParallelDims(dp_shard=1, cp=2, world_size=2)
    with pytest.raises(ConfigError, match="parallel.cp=2: DPOTrainModule cannot split its rows"):
        DPOTrainModule(model, optimizer, micro_batch_size=1, parallel_dims=dims)

    class PixelCollator(type(stack_collate)):
        model_input_keys = ("input_ids", "attention_mask", "pixel_values")

    with pytest.raises(ConfigError, match="parallel.cp=2: the batches also feed the model pixel_values"):
        LMTrainModule(model, optimizer, micro_batch_size=1, parallel_dims=dims, collator=PixelCollator())
    LMTrainModule(model, optimizer, micro_batch_size=1, parallel_dims=dims)
