"""What a GRPO step pays to send the policy's weights to the rollout server (``grpo.use_vllm``): one sync of a Llama
of a given size to a server on this machine (``honing/rollout/serve.py``, the transformers engine, loopback), timed
``--repeats`` times after a first send, with the bytes sent and the rate. The engine's loading is part of the time,
as it is in a run; vLLM's loading on a GPU is not measured here.

    python benchmarks/rollout_weight_sync.py [--hidden 1024 --layers 8 --vocab 32000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from honing.rollout.client import RolloutClient, weight_chunks  # noqa: E402

SERVE = Path(HERE).parent / "honing" / "rollout" / "serve.py"


def main() -> None:
    """Start a server on a saved model, send it the model's weights, print seconds and GB/s per sync."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, HERE)
    from common import machine_summary

    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(args.hidden // 64, 1),
        num_key_value_heads=max(args.hidden // 64, 1),
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        port_file = Path(folder) / "port"
        command = [sys.executable, str(SERVE), "--model", folder, "--engine", "transformers", "--device", "cpu"]
        command += ["--port", "0", "--host", "127.0.0.1", "--port-file", str(port_file)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None:
                    raise RuntimeError("the rollout server did not start")
                time.sleep(0.2)
            client = RolloutClient.connect(f"http://127.0.0.1:{port_file.read_text().strip()}", timeout=120)
            sent = sum(len(chunk) for chunk in weight_chunks(model, client.chunk_bytes, dtype=client.dtype))
            client.sync_weights(model, step=0)  # the first send, as a run's first step makes it
            seconds = []
            for step in range(1, args.repeats + 1):
                started = time.perf_counter()
                client.sync_weights(model, step=step)
                seconds.append(time.perf_counter() - started)
        finally:
            server.kill()
            server.wait()
    median = statistics.median(seconds)
    print(machine_summary())
    params = sum(p.numel() for p in model.parameters())
    print(
        f"llama {params / 1e6:.0f}M parameters, bf16: {sent / 1e6:.0f} MB per sync; median of {args.repeats}: "
        f"{median:.2f} s ({sent / median / 1e9:.2f} GB/s; each: {', '.join(f'{s:.2f}' for s in seconds)} s)"
    )


if __name__ == "__main__":
    main()
