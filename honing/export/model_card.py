"""The ``README.md`` model card written into every export (``hf/``, ``best/``, ``honing export`` and ``honing merge``
folders), in huggingface_hub's ``ModelCard`` format: YAML metadata the Hub reads, then what the run was.

Everything comes from the run's own records: its config (secrets redacted), the data it saw (``data.json``, split →
sources and rows), its ``metrics.jsonl`` and its ``eval/harness/*.json``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
from typing import TYPE_CHECKING, Any

import yaml

from honing.config.redact import redact
from honing.evaluate.harness import format_table, read_results
from honing.json_lines import json_lines

if TYPE_CHECKING:
    from huggingface_hub import ModelCard

CARD_FILE = "README.md"
#: the run's record of its data, saved with it and in every checkpoint
DATA_FILE = "data.json"
#: metrics a card shows besides every ``eval/...`` one
TRAIN_METRICS = ("train/loss", "train/reward")


def honing_version() -> str:
    """The installed honing's version."""
    try:
        return importlib.metadata.version("honing")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def data_summary(config: dict[str, Any], rows: dict[str, int]) -> dict[str, Any]:
    """What ``data.json`` holds: per split, its sources (path, format, weight, max_samples) and its rows."""
    data = config.get("data") or {}
    out = {}
    for split in ("train", "validation"):
        section = data.get(split) or {}
        sources = [
            {key: source.get(key) for key in ("path", "format", "weight", "max_samples") if source.get(key) is not None}
            for source in section.get("sources", [])
        ]
        if sources:
            out[split] = {"sources": sources, "rows": rows.get(split)}
    return out


def final_metrics(run_folder: str | None) -> dict[str, tuple[int, float]]:
    """The last logged value (and its step) of every ``eval/...`` metric and of the training loss / reward."""
    path = os.path.join(run_folder, "metrics.jsonl") if run_folder else None
    if path is None or not os.path.exists(path):
        return {}
    last: dict[str, tuple[int, float]] = {}
    for _, row in json_lines(path):
        if not isinstance(row, dict):  # a line cut short by a crash: the others still count
            continue
        step = row.get("step")
        for name, value in row.items():
            if (name.startswith("eval/") or name in TRAIN_METRICS) and isinstance(value, int | float):
                last[name] = (step, float(value))
    return dict(sorted(last.items()))


def build_model_card(
    config: dict[str, Any], *, data: dict[str, Any] | None = None, run_folder: str | None = None
) -> ModelCard:
    """The ``huggingface_hub.ModelCard`` of a run's export (``config``: the run's config as a plain mapping)."""
    from huggingface_hub import ModelCard, ModelCardData

    from honing.hub import is_hub_id

    config = redact(config)
    model = config.get("model") or {}
    method = config.get("method", "pretrain")
    card_cfg = config.get("model_card") or {}
    base = model.get("name_or_path")
    hub_base = base if base and is_hub_id(base) and not os.path.exists(base) else None
    data = data or {}
    hub_datasets = sorted(  # only names the Hub knows ("org/name[:split]"); files and generated tasks are not
        {
            source["path"].split(":")[0]
            for split in data.values()
            for source in split["sources"]
            if not source["path"].startswith("generated:")
            and is_hub_id(source["path"].split(":")[0])
            and not os.path.exists(source["path"])
        }
    )
    metrics = final_metrics(run_folder)
    harness = read_results(run_folder) if run_folder else {}
    card_data = ModelCardData(
        model_name=config.get("run_name") or "honing model",
        base_model=hub_base,
        license=card_cfg.get("license"),
        language=card_cfg.get("language") or None,
        library_name="transformers",
        tags=["honing", method, *(["lora"] if model.get("lora") else []), *card_cfg.get("tags", [])],
        datasets=hub_datasets or None,
        metrics=sorted({_metric_id(name) for name in metrics if name.startswith("eval/")}) or None,
    )
    body = [
        f"# {config.get('run_name') or 'honing model'}",
        "",
        f"Trained with honing {honing_version()}: method `{method}`"
        + (f", LoRA rank {model['lora'].get('rank')} merged into the weights" if model.get("lora") else "")
        + ".",
        "",
        "## Base model",
        "",
        _base_model_text(model),
        "",
        "## Training data",
        "",
        _data_table(data),
        "",
        "## Results",
        "",
        _metrics_table(metrics),
        "",
    ]
    if harness:
        body += ["## Evaluation (lm-evaluation-harness)", "", format_table(harness), ""]
    body += [
        "## Use",
        "",
        "```bash",
        "honing generate THIS_FOLDER --prompt 'Hello'   # or: honing chat THIS_FOLDER",
        "```",
        "",
        "## Training config",
        "",
        "The resolved config, secrets replaced by `***`:",
        "",
        "```yaml",
        yaml.safe_dump(config, sort_keys=False).rstrip(),
        "```",
        "",
    ]
    template = "---\n{{ card_data }}\n---\n\n" + "\n".join(body)
    return ModelCard.from_template(card_data, template_str=template)


def _metric_id(name: str) -> str:
    """The metric a logged name measures: ``eval/harness/<task>/<metric>[/filter]`` → metric, ``eval/<x>/...`` → x."""
    parts = name.split("/")
    return parts[3] if parts[1] == "harness" and len(parts) > 3 else parts[1]


def _base_model_text(model: dict[str, Any]) -> str:
    if model.get("name_or_path"):
        return f"`{model['name_or_path']}`"
    shape = ", ".join(f"{key}: {value}" for key, value in (model.get("config") or {}).items())
    return f"None: trained from random weights, built from a transformers config ({shape})."


def _data_table(data: dict[str, Any]) -> str:
    if not data:
        return "Not recorded."
    lines = ["| split | rows | source | format | weight |", "| --- | --- | --- | --- | --- |"]
    for split, entry in data.items():
        rows = entry.get("rows")
        for index, source in enumerate(entry["sources"]):
            shown = f"{rows:,}" if index == 0 and rows is not None else ("" if index else "not recorded")
            lines.append(
                f"| {split} | {shown} | `{source['path']}` | {source.get('format', 'auto')} | "
                f"{source.get('weight', 1.0)} |"
            )
    return "\n".join(lines) + "\n\nRows are the examples of a split after validation (all its sources together)."


def _metrics_table(metrics: dict[str, tuple[int, float]]) -> str:
    if not metrics:
        return "No metrics recorded."
    lines = ["| metric | value | step |", "| --- | --- | --- |"]
    for name, (step, value) in metrics.items():
        shown = f"{value:.4f}" if math.isfinite(value) else str(value)
        lines.append(f"| {name} | {shown} | {step} |")
    return "\n".join(lines)


def write_model_card(
    out_dir: str, config: dict[str, Any], *, data: dict[str, Any] | None = None, run_folder: str | None = None
) -> str:
    """Write ``OUT_DIR/README.md``; its path."""
    card = build_model_card(config, data=data, run_folder=run_folder)
    path = os.path.join(out_dir, CARD_FILE)
    card.save(path)
    return path


def write_checkpoint_card(checkpoint_dir: str, out_dir: str) -> str | None:
    """The card of an export made from a checkpoint: its ``config.yaml`` and ``data.json``, and its run folder's
    metrics (the checkpoint's parent). None when the checkpoint has no config (nothing to describe)."""
    config_path = os.path.join(checkpoint_dir, "config.yaml")
    if not os.path.exists(config_path):
        return None
    with open(config_path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    data_path = os.path.join(checkpoint_dir, DATA_FILE)
    data = None
    if os.path.exists(data_path):
        with open(data_path, encoding="utf-8") as handle:
            data = json.load(handle)
    return write_model_card(out_dir, config, data=data, run_folder=os.path.dirname(os.path.normpath(checkpoint_dir)))
