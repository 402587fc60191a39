"""``honing`` goes to the Hugging Face Hub only when a command must fetch something and the hub answers (issue 45):
``plan`` on a preset (its shape carried) or on a model whose config.json is cached runs offline without a single
request; an unreachable hub costs one short request, then the local cache, and one line when the cache lacks the
model, never huggingface_hub's retries. A user's own ``HF_HUB_OFFLINE`` decides instead."""

from __future__ import annotations

import http.server
import os
import socket
import threading

import huggingface_hub.constants
import pytest
from transformers import LlamaConfig

import honing.hub_access as hub_access
import honing.plan.from_config as plan_from_config
from honing.cli import build_parser, main
from honing.cli_hub import needs_of
from honing.hub_access import HubNeed
from tests.cli.test_bad_input import REPO, the_error_line

PRESET = str(REPO / "configs" / "models" / "smollm2" / "smollm2-1.7b-full-24gb.yaml")
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
HUB_HOST = "huggingface.co"


@pytest.fixture
def network_watched(monkeypatch) -> dict[str, list]:
    """The hub left to honing to decide (no HF_HUB_OFFLINE anywhere); records each probe of the hub and each DNS
    lookup of its host (a probe answers False: no test reaches the internet)."""
    for switch in hub_access.USER_SWITCHES:
        monkeypatch.delenv(switch, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    seen: dict[str, list] = {"probes": [], "lookups": []}
    monkeypatch.setattr(hub_access, "hub_answers", lambda timeout=0: seen["probes"].append(timeout) or False)
    real_lookup = socket.getaddrinfo

    def lookup(host, *args, **kwargs):
        if HUB_HOST in str(host):
            seen["lookups"].append(host)
            raise socket.gaierror(socket.EAI_NONAME, "blocked by the test")
        return real_lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    return seen


def offline_flags() -> tuple[bool, str | None]:
    """huggingface_hub's offline switch as its code reads it, and the environment's as child processes see it."""
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE), os.environ.get("HF_HUB_OFFLINE")


def test_plan_on_a_preset_runs_offline_without_any_request_and_restores_the_switch(
    network_watched, monkeypatch, capsys
):
    during = []
    real_plan = plan_from_config.plan_config
    monkeypatch.setattr(
        plan_from_config, "plan_config", lambda *a, **k: during.append(offline_flags()) or real_plan(*a, **k)
    )
    assert main(["plan", PRESET, "--budget", "24GiB"]) == 0
    captured = capsys.readouterr()
    assert "peak per rank" in captured.out
    assert during == [(True, "1")]  # offline while planning, for this process and any it starts
    assert network_watched == {"probes": [], "lookups": []}  # not one request, not one DNS lookup
    assert "Retry" not in captured.err
    assert offline_flags() == (False, None)  # as before, once the command is done


def test_plan_on_an_unreachable_hub_name_is_one_probe_then_one_line(network_watched, capsys, caplog):
    argv = ["plan", QUICKSTART, "model.config=null", "model.name_or_path=no-such-org/no-such-model"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model.name_or_path: 'no-such-org/no-such-model' is a Hugging Face hub name" in the_error_line(err)
    assert "cannot be reached from here (one request" in caplog.text  # the info line saying why it went offline
    assert len(network_watched["probes"]) == 1 and network_watched["lookups"] == []
    assert "Retry" not in err


def cache_with_config(cache, repo_id: str) -> None:
    """The hub cache layout huggingface_hub writes, holding only ``repo_id``'s config.json (a tiny Llama's)."""
    commit = "0" * 40
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    config.vocab_size = 512
    config.to_json_file(snapshot / "config.json")


def test_plan_on_a_cached_hub_model_reads_the_cache_without_asking_the_hub(
    network_watched, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cache_with_config(tmp_path / "hub", "someone/tiny-llama")
    argv = ["plan", QUICKSTART, "model.config=null", "model.name_or_path=someone/tiny-llama", "tokenizer.kind=byte"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "peak per rank" in capsys.readouterr().out
    assert network_watched == {"probes": [], "lookups": []}


def test_a_local_model_or_none_runs_offline_and_a_user_switch_is_left_alone(network_watched, tmp_path, monkeypatch):
    with hub_access.hub_access([HubNeed("model.name_or_path", str(tmp_path))]) as offline:
        assert offline and offline_flags() == (True, "1")
    with hub_access.hub_access([]) as offline:
        assert offline
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the user says: online
    with hub_access.hub_access([HubNeed("model.name_or_path", "no-such-org/no-such-model")]) as offline:
        assert not offline and offline_flags() == (False, "0")
    assert network_watched["probes"] == []


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 (http.server's name)
        self.send_response(401)  # any answer means reachable, a refusal included
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_probe_is_one_request_that_any_answer_satisfies(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        assert hub_access.hub_answers(timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert not hub_access.hub_answers(timeout=5)  # the port is closed now: refused at once


def needs(argv: list[str]) -> set[tuple[str, str, bool]]:
    """``(key, name, always)`` of what ``honing ARGV`` may read from the hub."""
    return {(need.key, need.name, need.always) for need in needs_of(build_parser().parse_args(argv))}


def test_what_each_verb_may_need_from_the_hub(tmp_path):
    preset_model = "HuggingFaceTB/SmolLM2-1.7B-Instruct"
    assert needs(["plan", PRESET]) == set()  # the preset carries its shape
    assert needs(["train", PRESET]) == {("model.name_or_path", preset_model, False)}  # training needs the weights
    assert needs(["export", str(tmp_path), str(tmp_path / "out")]) == set()
    assert needs(["eval", str(tmp_path), "--tasks", "hellaswag"]) == {
        ("MODEL_OR_RUN", str(tmp_path), False),
        ("--tasks", "hellaswag", True),  # its data set is on the hub
    }
    upload = ["callbacks.upload.save_path=hf://buckets/me/runs", "data.train.sources=[{path: someone/corpus:train}]"]
    assert needs(["train", QUICKSTART, *upload]) == {
        ("callbacks.upload.save_path", "hf://buckets/me/runs", True),
        ("data.train.sources[0].path", "someone/corpus", False),
    }
    assert needs(["train", QUICKSTART, "callbacks.hub.repo_id=me/run"]) == {("callbacks.hub.repo_id", "me/run", True)}
    assert needs(["train", QUICKSTART, "trainer.seed=abc"]) == set()  # a config that does not load: the verb says why
