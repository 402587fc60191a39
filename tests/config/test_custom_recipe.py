"""A config's own recipe class: the method it extends, read from the modules along its class chain."""

from __future__ import annotations

from honing.config.custom_recipe import method_of


def test_the_method_is_the_nearest_built_in_recipe_module_along_the_chain():
    chain = ["mypkg.recipes", "honing.recipes.vl_dpo", "honing.recipes.dpo", "honing.recipes.base", "builtins"]
    assert method_of(chain) == "vl_dpo"
    assert method_of(["mypkg.recipes", "honing.recipes.base", "builtins"]) is None  # the base is no method's
