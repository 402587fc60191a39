"""GRPO with tools under FSDP2 on 2 processes: rank 0's conversations call the calculator (their first turn is
rewritten into a call), rank 1's end after one turn, so rank 1 samples the second turn with nothing left to sample
(every rank takes part in every forward: without it the run hangs). A run stopped after step 2 resumes to the
weights of one that never stopped."""

import pytest
import yaml
from safetensors.torch import load_file

from tests.distributed.runs import assert_same_weights, failure_excerpt, honing_train, metrics
from tests.helpers import TINY_LLAMA_CONFIG

pytestmark = pytest.mark.slow

STEPS = 3
RECIPE = '''
import torch
import torch.distributed as dist

from honing.recipes.grpo import GRPORecipe

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call><|im_end|>'


class RankZeroCallsTools(GRPORecipe):
    """GRPO whose rank 0 conversations open with a calculator call."""

    def build_train_module(self, inputs):
        module = super().build_train_module(inputs)
        sampler = module.sampler
        sample = sampler.sample

        def scripted(batch, prompt_ids, prompt_mask, seeds, **sampling):
            ids, mask = sample(batch, prompt_ids, prompt_mask, seeds, **sampling)  # every rank samples
            if dist.get_rank() != 0:
                return ids, mask
            call = sampler.tokenizer(CALL, add_special_tokens=False)["input_ids"]
            ids = torch.nn.functional.pad(ids, (0, max(0, len(call) - ids.shape[1])), value=sampler.pad_token_id)
            mask = torch.nn.functional.pad(mask, (0, max(0, len(call) - mask.shape[1])))
            for row in range(len(ids)):
                if "<|im_start|>tool" not in sampler.tokenizer.decode(prompt_ids[row][prompt_mask[row].bool()]):
                    ids[row], mask[row] = sampler.pad_token_id, 0
                    ids[row, : len(call)], mask[row, : len(call)] = torch.tensor(call), 1
            return ids, mask

        sampler.sample = scripted
        return module
'''


def run(tmp_path, name, *overrides):
    """The tiny GRPO run with tools on 2 FSDP2 processes; its metrics by step."""
    raw = {
        "recipe": "rank_zero_tools:RankZeroCallsTools",
        "grpo": {
            "num_generations": 2,
            "max_completion_length": 120,
            "rewards": [{"name": "exact_answer"}],
            "tools": ["calculator"],
            "max_turns": 2,
        },
        "trainer": {
            "save_folder": str(tmp_path / name),
            "max_duration": f"{STEPS}steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {
            "train": {"sources": [{"path": str(tmp_path / "prompts.jsonl")}]},
            "chat_template": "chatml",
            "seq_len": 600,
            "global_batch_size": 2,  # 1 prompt per rank
            "micro_batch_size": 1,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": dict(TINY_LLAMA_CONFIG)},
        "optim": {"lr": 1e-2},
        "callbacks": {"sample": {"enabled": False}, "console": {"plain": True}, "checkpointer": {"save_interval": 2}},
    }
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = honing_train(str(config), "parallel.strategy=fsdp", *overrides, nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    return metrics(tmp_path / name)


def test_tool_turns_under_fsdp2_keep_the_ranks_in_step_and_resume(tmp_path, monkeypatch):
    (tmp_path / "rank_zero_tools.py").write_text(RECIPE)
    (tmp_path / "prompts.jsonl").write_text(
        "".join(f'{{"prompt": [{{"role": "user", "content": "{n} times"}}], "answer": "42"}}\n' for n in range(8))
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    straight = run(tmp_path, "straight")
    assert sorted(straight) == list(range(1, STEPS + 1))
    # rank 0's 2 completions call once each, rank 1's never: 2 calls over 4 completions
    assert all(row["train/tools/call_frequency"] == 0.5 for row in straight.values())
    run(tmp_path, "resumed", "trainer.hard_stop=2steps")
    resumed = run(tmp_path, "resumed")
    assert resumed[STEPS]["train/loss"] == straight[STEPS]["train/loss"]
    final = "hf/model.safetensors"
    assert_same_weights(load_file(str(tmp_path / "straight" / final)), load_file(str(tmp_path / "resumed" / final)))
