"""Several machines, simulated on this one: two torchrun launchers of two processes each meet through c10d
rendezvous and train like one launcher of four (HSDP: replicas across the "nodes", shards inside them). A save
folder that the second node does not see (its own mount namespace, a tmpfs over the folder) is refused at start."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.distributed.runs import REPO, failure_excerpt, honing_train, metrics, write_config

pytestmark = pytest.mark.slow

STEPS = 6
LAYOUT = ["parallel.dp_replicate=2", "parallel.dp_shard=2"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_nodes(config: str, *overrides: str, second_node_prefix: list[str] | None = None) -> list[tuple[int, str]]:
    """Start two launchers (``--nnodes 2 --nproc_per_node 2``, c10d rendezvous on loopback) at once; their exit codes
    and stderr. ``second_node_prefix`` runs the second launcher under another command (e.g. a mount namespace)."""
    port = free_port()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=2",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--rdzv_id=two-nodes",
        "--max_restarts=0",
        "-m",
        "honing",
        "train",
        config,
        *overrides,
    ]
    first = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(
        (second_node_prefix or []) + command,
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = []
    for process in (first, second):
        try:
            _, stderr = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        results.append((process.returncode, stderr))
    return results


def test_two_nodes_of_two_train_like_one_node_of_four(tmp_path):
    config, one_node = write_config(tmp_path, "one_node", steps=STEPS)
    result = honing_train(config, *LAYOUT, nproc=4, timeout=240)
    assert result.returncode == 0, failure_excerpt(result.stderr)
    config, two_nodes = write_config(tmp_path, "two_nodes", steps=STEPS)
    for code, stderr in launch_nodes(config, *LAYOUT):
        assert code == 0, failure_excerpt(stderr)
    ours, theirs = metrics(two_nodes), metrics(one_node)
    assert sorted(ours) == sorted(theirs) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert ours[step]["train/loss"] == pytest.approx(theirs[step]["train/loss"], rel=1e-6), step
    assert (two_nodes / f"step{STEPS}" / ".complete").exists()  # every rank's shards in the one shared folder


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_save_folder_the_other_node_does_not_see_is_refused_at_start(tmp_path):
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no mount namespaces here: {probe.stderr.decode().strip()}")
    runs = tmp_path / "runs"
    runs.mkdir()
    config, _ = write_config(tmp_path, "unshared", steps=STEPS)
    save_folder = runs / "unshared"
    # the second node sees its own empty disk where the first writes: a tmpfs over the runs folder
    own_disk = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount -t tmpfs tmpfs {runs} && exec "$@"',
        "sh",
    ]
    results = launch_nodes(config, *LAYOUT, f"trainer.save_folder={save_folder}", second_node_prefix=own_disk)
    assert all(code != 0 for code, _ in results)
    stderr = "".join(text for _, text in results)
    assert f"trainer.save_folder: {save_folder} is not shared by every machine" in stderr
    assert not (save_folder / "step1").exists()  # refused before the first step
