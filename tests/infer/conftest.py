"""Short runs of the project's example configs, trained once per test session, whose exports the inference tests
use: the quickstart (byte-level text, no chat template), the SFT example (ChatML) and its LoRA variant."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def train_example(config: str, save_folder: Path, *overrides: str) -> Path:
    """Train ``configs/CONFIG`` for a few steps in this process with ``overrides``; its save folder."""
    from honing.config import load_config
    from honing.recipes import recipe_class

    config = load_config(
        str(REPO / "configs" / config),
        [f"trainer.save_folder={save_folder}", "trainer.num_threads=1", "callbacks.console.plain=true", *overrides],
    )
    recipe_class(config.method)(config).run()
    return save_folder


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory) -> Path:
    """The quickstart's model after 3 steps on a slice of its data (it continues text; no chat template)."""
    return train_example(
        "quickstart.yaml",
        tmp_path_factory.mktemp("quickstart") / "run",
        "trainer.max_duration=3steps",
        'data.train.sources=[{path: "{stdlib}/json/*.py"}]',
        "data.global_batch_size=4",
        "data.micro_batch_size=4",
        "callbacks.evaluator.max_batches=1",
        "callbacks.sample.enabled=false",
    )


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory) -> Path:
    """The SFT example (ChatML) after 2 steps at a learning rate too small to make it stop at once: its greedy
    answers are many tokens long, so a decoding difference would show."""
    return train_example(
        "sft-full.yaml",
        tmp_path_factory.mktemp("sft") / "run",
        "trainer.max_duration=2steps",
        "optim.lr=1.0e-6",
        'data.train.sources=[{path: "generated:reverse?samples=64&seed=0"}]',
        "data.global_batch_size=4",
        'data.validation.sources=[{path: "generated:reverse?samples=8&seed=1"}]',
        "callbacks.generation_eval.num_prompts=2",
        "callbacks.generation_eval.max_new_tokens=2",
        "callbacks.checkpointer.save_interval=1",
        "callbacks.evaluator.interval=1",
    )


SECRET = "TOPSECRET-do-not-print-0042"
TRAIN = "generated:reverse?samples=64&seed=0"


@pytest.fixture(scope="session")
def lora_run(quickstart_run, tmp_path_factory):
    """The LoRA example on the quickstart's model, 2 steps, with a user scorer and secrets in its config."""
    return train_example(
        "sft-lora.yaml",
        tmp_path_factory.mktemp("lora") / "run",
        f"model.name_or_path={quickstart_run / 'hf'}",
        "trainer.max_duration=2steps",
        f'data.train.sources=[{{path: "{TRAIN}"}}]',
        'data.validation.sources=[{path: "generated:reverse?samples=8&seed=1"}]',
        "data.global_batch_size=4",
        "callbacks.generation_eval.num_prompts=4",
        "callbacks.generation_eval.max_new_tokens=3",
        'callbacks.generation_eval.metrics=[exact_match, "tests.export.scorers:first_letter_right"]',
        "callbacks.evaluator.interval=1",
        "callbacks.checkpointer.save_interval=1",
        "model_card.license=mit",
        "model_card.language=[en]",
        f"callbacks.wandb.api_key={SECRET}",
        f"storage.aws_secret_access_key={SECRET}",
    )
