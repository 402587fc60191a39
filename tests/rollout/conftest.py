"""A rollout server on a tiny llama (the transformers engine, CPU), started once for the folder's tests from the
server's own file with every import of honing refused, and killed at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import honing.rollout

SERVE = Path(honing.rollout.__file__).parent / "serve.py"

# `python serve.py` as in vLLM's own environment, where honing is not installed: any import of honing fails
LAUNCHER = """
import os, runpy, sys

class RefuseHoning:
    def find_spec(self, name, path=None, target=None):
        if name == "honing" or name.startswith("honing."):
            raise ImportError(f"the rollout server imported {name}; it must import nothing of honing")
        return None

sys.meta_path.insert(0, RefuseHoning())
serve = sys.argv[1]
sys.path.insert(0, os.path.dirname(serve))
sys.argv = sys.argv[1:]
runpy.run_path(serve, run_name="__main__")
"""

#: the byte-level tokenizer's vocabulary (256 bytes and 4 specials), so a GRPO run's model has the same shapes
TINY_LLAMA = dict(
    vocab_size=260,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=64,
)


@dataclass
class RunningServer:
    """A started server: its URL, the model folder it started from, its log."""

    url: str
    model_dir: Path
    log: Path

    def log_text(self) -> str:
        """What the server printed."""
        return self.log.read_text()


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer llama of random weights (seeded)."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).eval()


def start_server(model_dir: Path, folder: Path) -> tuple[subprocess.Popen, RunningServer]:
    """Start ``serve.py`` with the transformers engine on any free port; returns once it listens."""
    port_file, log = folder / "port", folder / "server.log"
    command = [sys.executable, "-c", LAUNCHER, str(SERVE), "--model", str(model_dir), "--engine", "transformers"]
    command += ["--device", "cpu", "--port", "0", "--host", "127.0.0.1", "--port-file", str(port_file)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while not port_file.exists() or not port_file.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the rollout server did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return process, RunningServer(f"http://127.0.0.1:{port_file.read_text()}", model_dir, log)


@pytest.fixture(scope="session")
def rollout_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rollout_server")
    tiny_llama(seed=0).save_pretrained(folder / "model")
    process, server = start_server(folder / "model", folder)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
