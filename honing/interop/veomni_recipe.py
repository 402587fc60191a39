"""VeOmni's recipe steps as its document writes them, adapted once when a recipe class is defined: honing's
``freeze_module(model)`` is VeOmni's ``freeze_module(self)``, which reads the model as ``self.model``; a
``build_model_assets`` that sets only ``self.processor`` (VeOmni's ``build_processor(...)``) also gives the recipe its
tokenizer (the processor's, or the processor itself for a tokenizer-only model) and what else the recipe's own step
sets (``complete_model_assets``: VL SFT's family and chat template); a class that writes ``build_data_transform`` or
``build_data_collate_info`` (steps honing's recipe does not have) gets them as its ``finish_data`` step
(``honing.interop.veomni_data``). Registered as a recipe adapter (``honing.interop.registrations``)."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def adapt_recipe_steps(cls: type) -> None:
    """Give ``cls``'s VeOmni-form steps honing's arguments, in place (a class in honing's form is left as it is)."""
    assets = vars(cls).get("build_model_assets")
    own = assets is not None and not (assets.__module__ or "").startswith("honing.")
    if own and not hasattr(assets, "completes_tokenizer"):
        cls.build_model_assets = with_tokenizer(assets)
    data_steps = hasattr(cls, "build_data_transform") or hasattr(cls, "build_data_collate_info")
    if data_steps and "finish_data" not in vars(cls):  # a class's own finish_data is left as it is
        cls.finish_data = finish_data_with_steps
    freeze = vars(cls).get("freeze_module")
    if freeze is None or list(inspect.signature(freeze).parameters) != ["self"]:
        return

    @functools.wraps(freeze)
    def freeze_module(self: Any, model: Any) -> None:
        self.model = InnerModelFallback(model)  # what VeOmni's step freezes (build sets self.model after it)
        freeze(self)

    cls.freeze_module = freeze_module


def finish_data_with_steps(self: Any, data: Any) -> Any:
    """The recipe's ``finish_data``: ``data`` after its VeOmni data steps (imported here, on a run that has them)."""
    from honing.interop.veomni_data import with_data_steps

    self.collator = data.collator  # VeOmni's collate step reads the data's collator as self.collator
    return with_data_steps(
        data,
        getattr(self, "build_data_transform", None),
        getattr(self, "build_data_collate_info", None),
        owner=f"{type(self).__name__}.build_data_collate_info",
        sp_size=self.parallel_dims.cp,
    )


def with_tokenizer(build_model_assets: Any) -> Any:
    """``build_model_assets`` that, when it leaves ``self.tokenizer`` unset, takes it from ``self.processor``."""

    @functools.wraps(build_model_assets)
    def completed(self: Any) -> Any:
        assets = build_model_assets(self)
        processor = getattr(self, "processor", None)
        if getattr(self, "tokenizer", None) is None and processor is not None:
            complete = getattr(self, "complete_model_assets", None)  # a recipe's own (VL SFT: family, template)
            if complete is not None:
                complete()
            else:
                self.tokenizer = getattr(processor, "tokenizer", None) or processor
        return assets

    completed.completes_tokenizer = True  # type: ignore[attr-defined]
    return completed


class InnerModelFallback:
    """The model as VeOmni's ``freeze_module`` reads it: an attribute the model lacks is its inner model's
    (transformers 5 moved ``visual`` from ``Qwen2VLForConditionalGeneration`` to its ``.model``)."""

    def __init__(self, model: Any):
        self.__dict__["_wrapped"] = model

    def __getattr__(self, name: str) -> Any:
        model = self.__dict__["_wrapped"]
        try:
            return getattr(model, name)
        except AttributeError:
            inner = getattr(model, "model", None)
            if inner is None or not hasattr(inner, name):
                raise
            return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_wrapped"], name, value)
