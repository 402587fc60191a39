"""One recipe per training method; ``recipe_class(config.method)`` picks it."""

import importlib

from honing.config import ConfigError, RunConfig
from honing.config.custom_recipe import import_recipe
from honing.recipes.base import Recipe

# method → "module:Class", imported on first use so `honing train` loads only the method it runs
RECIPES: dict[str, str] = {
    "pretrain": "honing.recipes.pretrain:PretrainRecipe",
    "sft": "honing.recipes.sft:SFTRecipe",
    "vl_sft": "honing.recipes.vl_sft:VLSFTRecipe",
    "dpo": "honing.recipes.dpo:DPORecipe",
    "vl_dpo": "honing.recipes.vl_dpo:VLDPORecipe",
    "orpo": "honing.recipes.reference_free:ReferenceFreeRecipe",
    "cpo": "honing.recipes.reference_free:ReferenceFreeRecipe",
    "kto": "honing.recipes.kto:KTORecipe",
    "grpo": "honing.recipes.grpo:GRPORecipe",
    "rloo": "honing.recipes.grpo:GRPORecipe",
    "ppo": "honing.recipes.ppo:PPORecipe",
    "online_dpo": "honing.recipes.online_dpo:OnlineDPORecipe",
    "vl_grpo": "honing.recipes.vl_grpo:VLGRPORecipe",
    "reward": "honing.recipes.reward:RewardRecipe",
    "distill": "honing.recipes.distill:DistillRecipe",
}


def recipe_class(method: str) -> type[Recipe]:
    """The recipe class that trains ``method``."""
    module, _, name = RECIPES[method].partition(":")
    return getattr(importlib.import_module(module), name)


def recipe_for(config: RunConfig) -> Recipe:
    """The recipe that runs ``config``: its ``recipe`` class (a subclass of the method's) or the method's own."""
    base = recipe_class(config.method)
    if config.recipe is None:
        return base(config)
    try:
        cls = import_recipe(config.recipe, "recipe")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if not issubclass(cls, base):
        raise ConfigError(
            f"recipe: {config.recipe!r} is not a subclass of {RECIPES[config.method]} (the recipe of method "
            f"{config.method!r}); subclass it, or set method to the one it extends"
        )
    return cls(config)


def __getattr__(name: str):  # `from honing.recipes import PretrainRecipe` keeps working
    for path in RECIPES.values():
        module, _, class_name = path.partition(":")
        if class_name == name:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(name)


__all__ = ["RECIPES", "Recipe", "recipe_class", "recipe_for"]
