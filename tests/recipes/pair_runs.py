"""The tiny pair-method run the DPO and reference-free recipe tests share: generated addition pairs, a 1-layer Llama
with LoRA, an evaluation every 2 steps."""

from __future__ import annotations

from typing import Any

from tests.helpers import TINY_LLAMA_CONFIG


def pair_run(tmp_path, method: str, name: str, *, steps: int, validation_samples: int, **sections: Any) -> dict:
    """The raw config of a ``method`` run in ``tmp_path/name``; a dict in ``sections`` updates that section's keys,
    any other value replaces it."""
    raw: dict[str, Any] = {
        "method": method,
        "trainer": {"save_folder": str(tmp_path / name), "max_duration": f"{steps}steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": "generated:addition_preference?samples=32&seed=0"}]},
            "validation": {"sources": [{"path": f"generated:addition_preference?samples={validation_samples}&seed=1"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 4,
            "micro_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {
            "config": dict(TINY_LLAMA_CONFIG),
            "lora": {"rank": 4, "alpha": 8},
        },
        "optim": {"lr": 1e-2},
        "callbacks": {
            "checkpointer": {"save_interval": 2, "keep_last": 1},
            "evaluator": {"interval": 2, "metric_for_best_model": "eval/rewards/accuracies"},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        if isinstance(values, dict) and isinstance(raw.get(section), dict):
            raw[section] = {**raw[section], **values}
        else:
            raw[section] = values
    return raw
