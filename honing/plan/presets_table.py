"""``python -m honing.plan.presets_table``: every preset under ``configs/models/`` planned with its own budget, as a
Markdown table (the one in ``docs/presets.md``). Planned from the shapes the presets carry, without the hub
(``--online``: read and compare each model's real config where the hub is reachable)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import yaml

from honing.plan.estimate import format_bytes
from honing.plan.presets import PRESETS_FOLDER, PlannedPreset, plan_preset, preset_paths

METHODS = {"sft": "SFT", "dpo": "DPO", "grpo": "GRPO", "vl_sft": "VL SFT"}


def training_kind(config: dict) -> str:
    """``QLoRA SFT``, ``LoRA DPO``, ``full GRPO`` ...: what trains and by which method."""
    model = config["model"]
    lora = model.get("lora") is not None or (config["method"] == "vl_sft" and "lora" not in model)
    kind = "QLoRA" if model.get("quantize") else ("LoRA" if lora else "full")
    return f"{kind} {METHODS[config['method']]}"


def micro_batch(config: dict) -> str:
    """The preset's micro-batch per GPU: rows × tokens (GRPO: prompts × completions × tokens)."""
    data = config["data"]
    if config["method"] == "grpo":
        generations = config["grpo"].get("num_generations", 8)
        return f"{data['micro_batch_size']} × {generations} × {data['seq_len']:,}"
    return f"{data['micro_batch_size']} × {data['seq_len']:,}"


def table_row(planned: PlannedPreset, folder: Path) -> str:
    """One preset's line of the table."""
    config = yaml.safe_load(planned.path.read_text())
    budget = planned.budget
    gpus = f"{budget.nproc} × {budget.text}" if budget.nproc > 1 else budget.text
    share = planned.estimate.peak / budget.bytes
    cells = [
        f"`{planned.path.relative_to(folder)}`",
        f"`{config['model']['name_or_path']}`",
        training_kind(config),
        gpus,
        micro_batch(config),
        format_bytes(planned.estimate.peak),
        f"{share:.0%}",
    ]
    return "| " + " | ".join(cells) + " |"


def presets_table(folder: Path = PRESETS_FOLDER, plan: Callable[[Path], PlannedPreset] = plan_preset) -> str:
    """The Markdown table of every preset under ``folder`` and its planned peak per GPU (``plan``: how a preset is
    planned, ``honing plan``'s way)."""
    header = (
        "| preset | model | training | budget per GPU | micro-batch per GPU | planned peak per GPU | of the budget |\n"
        "| --- | --- | --- | --- | --- | ---: | ---: |"
    )
    return "\n".join([header, *(table_row(plan(path), folder) for path in preset_paths(folder))])


def main(argv: list[str] | None = None) -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(prog="python -m honing.plan.presets_table", description=__doc__)
    parser.add_argument("--online", action="store_true", help="read (and compare) each model's config on the hub")
    args = parser.parse_args(argv)
    if not args.online:
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True  # read once at import: HF_HUB_OFFLINE=1, set here
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # torchao's enum notices (as the CLI does)
    print(presets_table())


if __name__ == "__main__":
    main()
