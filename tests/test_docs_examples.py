"""Every Python block of the docs pages that promise runnable examples runs as written (in a scratch folder, from
the repository's configs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: pages whose Python blocks are runnable as written
PAGES = ["docs/python-api.md"]


def python_blocks(page: str) -> list[str]:
    """The fenced ```python blocks of a docs page."""
    return re.findall(r"```python\n(.*?)```", (REPO / page).read_text(), flags=re.S)


@pytest.mark.parametrize(("page", "index"), [(page, i) for page in PAGES for i in range(len(python_blocks(page)))])
def test_a_docs_python_block_runs_as_written(tmp_path, page, index):
    (tmp_path / "configs").symlink_to(REPO / "configs")  # the examples name the repository's configs
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HONING_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    code = "import torch\ntorch.set_num_threads(1)\n" + python_blocks(page)[index]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "runs").is_dir()  # it trained and wrote its run
