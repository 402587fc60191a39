"""A config typo is answered before torch and transformers are imported (issue 45: it took 15-30 s, the imports
first): ``honing train`` with a bad override or a misspelt YAML key, in a fresh interpreter, leaves them unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")

# the command's exit code, its stderr's lines, and which heavy libraries it had loaded when it returned
PROBE = """
import contextlib, io, json, sys
from honing.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "err": err.getvalue().splitlines(),
                  "loaded": [name for name in ("torch", "transformers") if name in sys.modules]}))
"""


def honing_train(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, "train", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "args, message",
    [
        ((QUICKSTART, "bad.key=1"), "bad: unknown key"),
        ((QUICKSTART, "trainer.max_duration=3"), "did you mean '3steps'?"),
    ],
)
def test_a_bad_override_is_refused_before_torch_is_imported(args, message):
    result = honing_train(*args)
    assert result["code"] == 2 and len(result["err"]) == 1 and message in result["err"][0]
    assert result["loaded"] == []


def test_a_misspelt_yaml_key_is_refused_before_torch_is_imported(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(Path(QUICKSTART).read_text().replace("max_duration:", "max_duraton:"))
    result = honing_train(str(config))
    assert result["code"] == 2
    assert result["err"] == [
        f"honing: error: {config}: trainer.max_duraton: unknown key; did you mean trainer.max_duration?"
    ]
    assert result["loaded"] == []
