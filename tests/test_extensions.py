"""honing's extension points (``honing/extensions.py``): importing honing alone fills them with the other systems'
entries, by path, without importing those modules or torch, an entry is imported when it is first used, and the
recipe and callback adapters are what the recipes call (the recipes import no interop module)."""

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
    "adapters": extensions.RECIPE_ADAPTERS + extensions.CALLBACK_ADAPTERS,
    "loaded": sorted(m for m in sys.modules if m.startswith(("torch", "honing.interop.", "honing.rl"))),
}))
"""


def test_importing_honing_registers_the_edge_and_imports_nothing_heavy():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["schemes"] == ["verl"] and found["formats"] == ["olmocr_batch", "olmocr_pages"]
    assert found["adapters"] == [
        "honing.interop.veomni_recipe:adapt_recipe_steps",
        "honing.interop.callback_names:with_honing_event_names",
    ]
    assert found["loaded"] == ["honing.interop.registrations"]


def test_an_entry_is_imported_once_when_first_used():
    assert extensions.load("json:dumps") is json.dumps
    assert extensions.load("honing.interop.verl_rewards:resolve") is extensions.load(extensions.REWARD_SCHEMES["verl"])


ADAPTED: list[str] = []


def note_class(cls: type) -> None:
    """A recipe adapter that records the classes it saw."""
    ADAPTED.append(cls.__name__)


def tag_callback(callback: object) -> object:
    """A callback adapter that wraps what it is given."""
    return ("tagged", callback)


def test_recipe_classes_and_callbacks_pass_through_every_registered_adapter(monkeypatch):
    from honing.interop.veomni_recipe import finish_data_with_steps
    from honing.recipes.base import Recipe
    from honing.recipes.pretrain import PretrainRecipe

    adapters = [*extensions.RECIPE_ADAPTERS, "tests.test_extensions:note_class"]
    monkeypatch.setattr(extensions, "RECIPE_ADAPTERS", adapters)

    class Honings(PretrainRecipe):
        pass

    class VeOmniForm(PretrainRecipe):
        def build_data_transform(self):
            return None

    assert ADAPTED[-2:] == ["Honings", "VeOmniForm"]
    # the data steps VeOmni's recipe writes become the recipe's finish_data; a class in honing's form keeps its own
    assert Honings.finish_data is Recipe.finish_data and VeOmniForm.finish_data is finish_data_with_steps
    monkeypatch.setattr(extensions, "CALLBACK_ADAPTERS", ["tests.test_extensions:tag_callback"])
    assert extensions.adapt_callback("c") == ("tagged", "c")
