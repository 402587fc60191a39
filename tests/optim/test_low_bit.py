"""``optim.state_dtype: int8``: torchao's AdamW8bit trains a tiny model with 8-bit moments, and a run stopped at a
checkpoint resumes to the same losses and bit-identical weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("torchao")

from honing.config import validate  # noqa: E402
from honing.errors import ConfigError  # noqa: E402
from honing.recipes.sft import SFTRecipe  # noqa: E402
from tests.e2e.test_cli import final_weights  # noqa: E402


def config(folder, precision="fp32", **optim):
    return validate(
        {
            "method": "sft",
            "trainer": {
                "save_folder": str(folder),
                "max_duration": "6steps",
                "num_threads": 1,
                "seed": 0,
                "precision": precision,
            },
            "data": {
                "train": {"sources": [{"path": "generated:reverse?samples=200&seed=0&letters=1"}]},
                "chat_template": "chatml",
                "seq_len": 128,
                "global_batch_size": 4,
                "cache_dir": str(folder.parent / "cache"),
            },
            "model": {
                "config": {
                    "model_type": "llama",
                    "hidden_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 2,
                    "intermediate_size": 128,
                }
            },
            "optim": {"lr": 1e-3, "state_dtype": "int8", **optim},
            "callbacks": {
                "checkpointer": {"save_interval": 3, "async_save": True},
                "evaluator": {"enabled": False},
                "sample": {"enabled": False},
                "console": {"enabled": False},
            },
        }
    )


def losses(folder):
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["train/loss"] for row in rows if "train/loss" in row}


@pytest.mark.parametrize("rounding", [False, True], ids=["fp32", "bf16-stochastic-rounding"])
def test_8bit_adamw_trains_and_resumes_bit_identically(tmp_path, rounding):
    from torchao.optim.subclass_8bit import OptimState8bit

    folder = tmp_path / "run"
    settings = {"precision": "bf16", "bf16_stochastic_round": True} if rounding else {}
    recipe = SFTRecipe(config(folder, **settings))
    recipe.run()
    states = [s for state in recipe.train_module.optimizer.state.values() for s in state.values()]
    eight_bit = [s for s in states if isinstance(s, OptimState8bit)]
    assert eight_bit and all(s.codes.dtype == torch.uint8 for s in eight_bit)
    first = losses(folder)
    assert first[6] < first[1]
    expected = final_weights(folder)
    # stop at step 3: the step-3 checkpoint (async) is all that is left of the run, then train on from it
    shutil.rmtree(folder / "step6")
    shutil.rmtree(folder / "hf")
    SFTRecipe(config(folder, **settings)).run()
    again = losses(folder)
    assert [again[step] for step in (4, 5, 6)] == [first[step] for step in (4, 5, 6)]
    actual = final_weights(folder)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_fused_with_8bit_states_is_refused_by_key(tmp_path):
    with pytest.raises(ConfigError, match="optim.fused: .*optim.state_dtype: int8"):
        SFTRecipe(config(tmp_path / "run", fused=True)).build()


def test_stochastic_rounding_needs_8bit_states(tmp_path):
    raw = config(tmp_path / "run").model_dump()
    raw["optim"].update(state_dtype=None, bf16_stochastic_round=True)
    with pytest.raises(ConfigError, match="optim.bf16_stochastic_round: used only with optim.state_dtype: int8"):
        validate(raw)
