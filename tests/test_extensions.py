"""honing's extension points (``honing/extensions.py``): importing honing alone fills them with the other systems'
entries, by path, without importing those modules or torch, and an entry is imported when it is first used."""

from __future__ import annotations

import json
import subprocess
import sys

from honing import extensions

PROBE = """
import json, sys
import honing
from honing import extensions
print(json.dumps({
    "schemes": sorted(extensions.REWARD_SCHEMES),
    "formats": sorted(extensions.SOURCE_FORMAT_READERS),
    "loaded": sorted(m for m in sys.modules if m.startswith(("torch", "honing.interop.", "honing.rl"))),
}))
"""


def test_importing_honing_registers_the_edge_and_imports_nothing_heavy():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["schemes"] == ["verl"] and found["formats"] == ["olmocr_batch", "olmocr_pages"]
    assert found["loaded"] == ["honing.interop.registrations"]


def test_an_entry_is_imported_once_when_first_used():
    assert extensions.load("json:dumps") is json.dumps
    assert extensions.load("honing.interop.verl_rewards:resolve") is extensions.load(extensions.REWARD_SCHEMES["verl"])
