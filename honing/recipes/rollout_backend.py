"""Where a GRPO run's completions are sampled (``grpo.use_vllm``, ``rloo.use_vllm``): honing's own decoder in the
training process, or a rollout server (``honing.rollout``; ``make vllm-serve``, docs/rollout-server.md)."""

from __future__ import annotations

import logging
from typing import Any

from honing.distributed import is_rank0, ranks_where
from honing.errors import ConfigError
from honing.recipes.grpo_validation import announce_rollout_backend
from honing.rollout.client import RolloutClient

log = logging.getLogger(__name__)

#: where TRL's ``vllm-serve`` and ``make vllm-serve`` listen by default
DEFAULT_SERVER_URL = "http://localhost:8000"
DEFAULT_SERVER_PROBE_S = 2.0  # the one look at the default URL when no server is configured


def rollout_sampler(section: Any, method: str) -> RolloutClient | None:
    """The rollout server's client, or None where honing's own decoder samples (``use_vllm`` false; or true with
    no server configured and none at the default URL: said in one info line). A configured server that does not
    answer within ``vllm_server_timeout`` stops the run, naming its URL."""
    key = "rloo" if method == "rloo" else "grpo"
    # every key of the section is read, whether use_vllm makes it moot or not (TRL ignores them then too)
    url, mode, timeout = configured_url(section), section.vllm_mode, section.vllm_server_timeout
    if not section.use_vllm:
        return None
    if mode == "colocate":
        raise ConfigError(
            f"{key}.vllm_mode: 'colocate' (vLLM inside the training process) is not built; set {key}.use_vllm: false "
            f"(honing's own decoder samples in the training process), or start a rollout server (make vllm-serve; "
            f"docs/rollout-server.md) and set {key}.vllm_mode: server"
        )
    if method == "vl_grpo":
        if url is not None:
            raise ConfigError(
                f"{key}.use_vllm: the rollout server samples from token ids alone, and vl_grpo's prompts carry "
                f"images; remove {key}.vllm_server_* (honing's own decoder samples them)"
            )
        announce_rollout_backend(section, key, "the rollout server takes no images, which vl_grpo's prompts carry")
        return None
    if url is not None:
        named = "vllm_server_base_url" if section.vllm_server_base_url else "vllm_server_host / vllm_server_port"
        return RolloutClient.connect(url, timeout=timeout, key=f"{key}.{named}")
    client = RolloutClient.wait_for(DEFAULT_SERVER_URL, timeout=0, attempt_timeout=DEFAULT_SERVER_PROBE_S)
    # every rank must agree: one without the server (another node's localhost) would leave the others' gathers alone
    if ranks_where(client is None):
        announce_rollout_backend(section, key)
        return None
    if is_rank0():
        log.info("%s.use_vllm: the rollout server at %s samples the completions", key, DEFAULT_SERVER_URL)
    return client


def configured_url(section: Any) -> str | None:
    """The server's URL when the config names one (``vllm_server_base_url``, or ``vllm_server_host`` /
    ``vllm_server_port`` set explicitly); None when it names none."""
    host, port = section.vllm_server_host, section.vllm_server_port
    if section.vllm_server_base_url:
        return section.vllm_server_base_url
    if {"vllm_server_host", "vllm_server_port"} & section.model_fields_set:
        return f"http://{host}:{port}"
    return None
