"""A GRPO run with ``grpo.use_vllm: true`` and a rollout server: it trains on the server's completions, sending the
policy's weights before each step's rollouts; a server at the default URL is found without configuring it."""

from __future__ import annotations

import json
import logging
import urllib.request

import pytest
import yaml

from honing.config import validate
from honing.config.schema import GRPOSection
from honing.recipes import rollout_backend
from honing.recipes.grpo import GRPORecipe
from honing.rollout.client import RolloutClient
from tests.distributed.runs import failure_excerpt, honing_train
from tests.recipes.test_grpo import grpo_raw, read_jsonl
from tests.rollout.conftest import TINY_LLAMA


def counts(url):
    """(weights versions loaded, /generate requests answered) so far."""
    with urllib.request.urlopen(f"{url}/health", timeout=30) as response:
        health = json.loads(response.read())
    return health["weights_version"], health["generate_requests"]


def test_a_grpo_run_samples_from_the_server_which_gets_each_steps_weights(rollout_server, tmp_path):
    raw = grpo_raw(tmp_path, use_vllm=True, vllm_server_base_url=rollout_server.url, vllm_server_timeout=30)
    raw["model"]["config"]["num_hidden_layers"] = TINY_LLAMA["num_hidden_layers"]  # the server's model's shapes
    raw["trainer"]["max_duration"] = "2steps"
    versions, requests = counts(rollout_server.url)
    recipe = GRPORecipe(validate(raw))
    recipe.run()
    assert isinstance(recipe.train_module.sampler.rollout_sampler, RolloutClient)
    assert [row["step"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    assert counts(rollout_server.url) == (versions + 2, requests + 2)  # one weight update and one request per step


def test_a_server_at_the_default_url_is_used_when_none_is_configured(rollout_server, monkeypatch, caplog):
    monkeypatch.setattr(rollout_backend, "DEFAULT_SERVER_URL", rollout_server.url)
    with caplog.at_level(logging.INFO, logger="honing.recipes.rollout_backend"):
        client = rollout_backend.rollout_sampler(GRPOSection(use_vllm=True), "grpo")
    assert client.base_url == rollout_server.url and client.dtype is not None
    assert [r.getMessage() for r in caplog.records] == [
        f"grpo.use_vllm: the rollout server at {rollout_server.url} samples the completions"
    ]


@pytest.mark.slow
def test_two_fsdp_processes_gather_the_weights_together_and_each_samples_its_own_prompts(rollout_server, tmp_path):
    raw = grpo_raw(tmp_path, use_vllm=True, vllm_server_base_url=rollout_server.url, vllm_server_timeout=30)
    raw["model"]["config"]["num_hidden_layers"] = TINY_LLAMA["num_hidden_layers"]
    raw["trainer"]["max_duration"] = "2steps"
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(raw))
    versions, requests = counts(rollout_server.url)
    result = honing_train(str(path), nproc=2, timeout=300)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    assert [row["step"] for row in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
    # rank 0 sent each step's weights once; each rank asked for its own prompts' completions each step
    assert counts(rollout_server.url) == (versions + 2, requests + 4)
