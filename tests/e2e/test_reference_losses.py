"""The example configs' losses are pinned: a refactor of the loop, the train module or the recipes must
not change a single number.

``reference_losses.json`` holds ``train/loss`` of the quickstart's first 50 steps and of the SFT examples'
first steps, recorded before the method-agnostic core was introduced. On a CPU of the same instruction
set as the recording machine they must be equal bit for bit; elsewhere the BLAS kernels sum in another
order, so there they are compared within a relative 1e-4 (the test says which comparison it made).
Regenerate (only for an intended change of numbers) with ``python tests/e2e/test_reference_losses.py``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(HERE, "reference_losses.json")
# the first steps of each example: enough to cover warmup, the schedule and several optimizer updates
QUICKSTART_STEPS = 50
SFT_STEPS = 12


def cpu_signature() -> str:
    """What decides the float kernels torch picks on this CPU: its vector extensions."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        flags = []
    return " ".join(sorted(flag for flag in flags if flag.startswith(("avx", "fma", "amx"))))


def _losses(save_folder: str) -> list[float]:
    rows = [json.loads(line) for line in open(os.path.join(save_folder, "metrics.jsonl"), encoding="utf-8")]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def _run(config_name: str, save_folder: str, *overrides: str) -> list[float]:
    import torch

    from honing.config import load_config
    from honing.recipes import recipe_class

    torch.set_num_threads(1)
    quiet = ["callbacks.console.enabled=false", "callbacks.sample.enabled=false"]
    if config_name.startswith("sft"):
        quiet.append("callbacks.generation_eval.enabled=false")
    config = load_config(
        os.path.join(ROOT, "configs", config_name),
        [
            f"trainer.save_folder={save_folder}",
            "trainer.num_threads=1",
            "trainer.metrics_collect_interval=1",
            *quiet,
            *overrides,
        ],
    )
    recipe_class(config.method)(config).run()
    return _losses(save_folder)


def run_examples(folder: str) -> dict[str, list[float]]:
    """The three examples' first losses; the LoRA example starts from the quickstart's 50-step export."""
    quickstart = os.path.join(folder, "quickstart")
    losses = {"quickstart": _run("quickstart.yaml", quickstart, f"trainer.hard_stop={QUICKSTART_STEPS}steps")}
    losses["sft-full"] = _run("sft-full.yaml", os.path.join(folder, "sft-full"), f"trainer.hard_stop={SFT_STEPS}steps")
    losses["sft-lora"] = _run(
        "sft-lora.yaml",
        os.path.join(folder, "sft-lora"),
        f"trainer.hard_stop={SFT_STEPS}steps",
        f"model.name_or_path={quickstart}/hf",
    )
    return losses


@pytest.mark.slow
def test_example_losses_equal_the_reference(tmp_path):
    with open(REFERENCE, encoding="utf-8") as handle:
        reference = json.load(handle)
    losses = run_examples(str(tmp_path))
    assert {name: len(values) for name, values in losses.items()} == {
        "quickstart": QUICKSTART_STEPS,
        "sft-full": SFT_STEPS,
        "sft-lora": SFT_STEPS,
    }
    if reference["cpu_signature"] == cpu_signature():
        assert losses == reference["losses"]  # bit for bit
    else:
        for name, values in reference["losses"].items():
            assert losses[name] == pytest.approx(values, rel=1e-4), name


if __name__ == "__main__":
    import tempfile

    sys.path.insert(0, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        result = {"cpu_signature": cpu_signature(), "losses": run_examples(tmp)}
    with open(REFERENCE, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(f"wrote {REFERENCE}")
