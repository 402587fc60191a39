"""Where ``grpo.use_vllm`` sends a run's sampling: nowhere when false, a configured rollout server (or an error naming
its URL), honing's own decoder (one info line) when none is configured or found; what is not built is refused."""

from __future__ import annotations

import logging
import time

import pytest

from honing.config.rloo_schema import RLOOSection
from honing.config.schema import GRPOSection
from honing.errors import ConfigError
from honing.recipes.rollout_backend import configured_url, rollout_sampler

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers there


def test_use_vllm_false_samples_in_the_training_process():
    assert rollout_sampler(GRPOSection(vllm_server_base_url=NOWHERE), "grpo") is None


def test_a_configured_server_that_does_not_answer_stops_the_run_naming_its_url():
    started = time.monotonic()
    with pytest.raises(
        ConfigError, match=r"^grpo.vllm_server_base_url: no rollout server answers at http://127.0.0.1:9 "
    ):
        rollout_sampler(GRPOSection(use_vllm=True, vllm_server_base_url=NOWHERE, vllm_server_timeout=0.5), "grpo")
    assert time.monotonic() - started < 10
    with pytest.raises(ConfigError, match=r"^rloo.vllm_server_host / vllm_server_port: .* at http://127.0.0.1:9 "):
        rollout_sampler(
            RLOOSection(use_vllm=True, vllm_server_port=9, vllm_server_host="127.0.0.1", vllm_server_timeout=0.1),
            "rloo",
        )


def test_the_url_comes_from_the_base_url_or_an_explicit_host_or_port():
    assert configured_url(GRPOSection()) is None  # TRL's defaults alone configure nothing
    assert configured_url(GRPOSection(vllm_server_base_url="http://a:1")) == "http://a:1"
    assert configured_url(GRPOSection(vllm_server_port=8123)) == "http://0.0.0.0:8123"
    assert configured_url(RLOOSection(vllm_server_host="10.0.0.5")) == "http://10.0.0.5:8000"


def test_colocate_mode_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^grpo.vllm_mode: 'colocate' .* is not built"):
        rollout_sampler(GRPOSection(use_vllm=True, vllm_mode="colocate"), "grpo")


def test_vl_grpo_samples_with_its_own_decoder_and_refuses_a_configured_server(caplog):
    with pytest.raises(ConfigError, match=r"^grpo.use_vllm: the rollout server samples from token ids alone"):
        rollout_sampler(GRPOSection(use_vllm=True, vllm_server_base_url=NOWHERE), "vl_grpo")
    with caplog.at_level(logging.INFO, logger="honing.recipes.grpo_validation"):
        assert rollout_sampler(GRPOSection(use_vllm=True), "vl_grpo") is None
    assert [r.getMessage() for r in caplog.records] == [
        "grpo.use_vllm: the rollout server takes no images, which vl_grpo's prompts carry; honing's own decoder "
        "samples the completions"
    ]
