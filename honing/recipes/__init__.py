"""One recipe per training method; ``RECIPES[config.method]`` picks it."""

from honing.recipes.base import Recipe
from honing.recipes.pretrain import PretrainRecipe

RECIPES: dict[str, type[Recipe]] = {"pretrain": PretrainRecipe}

__all__ = ["RECIPES", "Recipe", "PretrainRecipe"]
