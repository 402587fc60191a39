"""The rollout server's HTTP protocol (``honing/rollout/serve.py``) on its transformers engine, and its rule: it imports
nothing of honing, so that it runs in vLLM's own environment (the server of these tests is started with every
import of honing refused)."""

from __future__ import annotations

import ast
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from safetensors.torch import save

import honing.rollout
from honing.rollout.serve import SERVER_NAME, until_stop
from tests.rollout.conftest import tiny_llama

SERVER_FILES = ("serve.py", "engines.py", "vllm_worker.py", "json_http.py")  # what runs in vLLM's environment


def call(url, path, body=None, content_type="application/json"):
    """(status, JSON answer) of one request."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def generate_request(**changes):
    request = dict(prompts=[[5, 6, 7], [9]], seeds=[1, 2], temperature=0.0, top_p=1.0, top_k=0, max_tokens=6)
    return {**request, "stop_token_ids": [], **changes}


@pytest.mark.parametrize("name", SERVER_FILES)
def test_the_server_imports_nothing_of_honing(name):
    tree = ast.parse((Path(honing.rollout.__file__).parent / name).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [
        f"{'.' * node.level}{node.module or ''}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ]
    assert not [module for module in imported if module.split(".")[0] == "honing"]
    # its own files only, relatively (python -m honing.rollout.serve) or from its folder (python serve.py)
    assert {module for module in imported if module.startswith(".")} <= {"."}


def test_health_names_the_server_its_engine_and_weights_version(rollout_server):
    status, health = call(rollout_server.url, "/health")
    assert status == 200 and health["server"] == SERVER_NAME and health["engine"] == "transformers"
    assert health["model"] == str(rollout_server.model_dir) and health["dtype"] == "float32"
    assert call(rollout_server.url, "/weights_version")[1] == {"weights_version": health["weights_version"]}
    assert call(rollout_server.url, "/nothing")[0] == 404


def test_a_completion_ends_at_its_first_stop_token_which_it_keeps(rollout_server):
    free = call(rollout_server.url, "/generate", generate_request())[1]["completions"]
    assert [len(tokens) for tokens in free] == [6, 6]
    stop = free[0][2]
    stopped = call(rollout_server.url, "/generate", generate_request(stop_token_ids=[stop]))[1]["completions"]
    assert stopped[0] == free[0][: free[0].index(stop) + 1]
    assert stopped[1] == until_stop(free[1], [stop])


def test_requests_the_server_cannot_honour_are_refused_with_the_reason(rollout_server):
    url = rollout_server.url
    version = call(url, "/weights_version")[1]["weights_version"]
    status, answer = call(url, "/generate", generate_request(weights_version=version + 7))
    assert status == 409 and f"expects weights version {version + 7}" in answer["error"]
    status, answer = call(url, "/generate", generate_request(seeds=[1]))
    assert status == 400 and "2 prompts but 1 seeds" in answer["error"]
    assert call(url, "/generate", b"not json")[0] == 400
    blob = save({"model.no_such.weight": tiny_llama().lm_head.weight.detach()})
    assert call(url, "/update_weights?first=0&last=1", blob, "application/octet-stream")[0] == 409  # none open
    status, answer = call(url, "/update_weights?first=1&last=1", blob, "application/octet-stream")
    assert status == 400 and "model.no_such.weight" in answer["error"]
    assert call(url, "/weights_version")[1]["weights_version"] == version  # nothing was loaded
    assert call(url, "/generate", generate_request())[0] == 200  # and the refused update left none open


def test_a_chunked_update_counts_one_version_and_loads_every_chunk(rollout_server):
    url = rollout_server.url
    version = call(url, "/weights_version")[1]["weights_version"]
    model = tiny_llama(seed=8)
    state = {name: value.detach() for name, value in model.state_dict().items()}
    names = sorted(state)
    halves = [
        save({n: state[n] for n in names[: len(names) // 2]}),
        save({n: state[n] for n in names[len(names) // 2 :]}),
    ]
    assert (
        call(url, "/update_weights?first=1&last=0", halves[0], "application/octet-stream")[1]["weights_version"]
        == version
    )
    status, answer = call(url, "/generate", generate_request())
    assert status == 409 and "update is open" in answer["error"]
    assert call(url, "/update_weights?first=0&last=1", halves[1], "application/octet-stream")[1] == {
        "tensors": len(names) - len(names) // 2,
        "weights_version": version + 1,
    }
    assert call(url, "/reset_prefix_cache", b"")[1] == {"status": "ok"}


@pytest.mark.parametrize(
    ("tokens", "stops", "expected"),
    [([4, 2, 9, 2], [2], [4, 2]), ([4, 5], [2], [4, 5]), ([2], [2, 3], [2]), ([], [2], [])],
)
def test_until_stop_keeps_the_first_stop_token(tokens, stops, expected):
    assert until_stop(tokens, stops) == expected
