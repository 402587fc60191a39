"""``build_run``: a run from its config and its method's spec (a recipe's steps), top to bottom. Each step takes
what it needs as arguments and returns what it made: model assets -> model -> reference -> data (through the row
kind) -> train module -> outputs -> callbacks and Trainer; nothing is read back from a half-built object."""

from __future__ import annotations

from typing import TYPE_CHECKING

from honing import storage
from honing.config import RunConfig, to_yaml
from honing.config.trainer_schema import StorageSection
from honing.distributed import is_rank0, print0
from honing.errors import ConfigError
from honing.models import count_parameters
from honing.recipes.prerequisites import check_model_inputs
from honing.recipes.run_paths import check_run_paths
from honing.run.parts import ModelAssets, RunParts, TrainInputs
from honing.train import Trainer
from honing.train.precision import describe_device
from honing.train.shared_folder import check_shared_folder

if TYPE_CHECKING:
    from honing.data.finetune_data import RunData
    from honing.recipes.base import Recipe


def build_run(config: RunConfig, spec: Recipe) -> tuple[RunParts, Trainer]:
    """Run every build step of ``spec`` in order over ``config``; the run's parts and its Trainer."""
    configure_storage(config.storage)
    check_model_inputs(config)  # a missing example output: one line with its command, before any hub call
    check_run_paths(config)  # save folder, load path, data paths: one line each, before any model
    layout = spec.parallel_dims.describe()  # a layout that cannot fit fails here, before any model is built
    assets = run_assets(spec)
    try:
        model = spec.build_model(assets)
    except ValueError as error:  # transformers' word for an unknown kernel names no config key
        if "attn_implementation" not in str(error):
            raise
        raise ConfigError(f"model.attn_implementation: {error} honing also takes auto (the default).") from error
    spec.freeze_module(model)
    reference_model = spec.build_reference_model(model, assets)  # copied from the model before it is parallelised
    model = spec.build_parallel(model)
    # from_pretrained hands the model over in eval mode, while a wrapper built around it (peft's, DDP's) starts
    # in training mode, and the train module's "still training?" check reads the wrapper: without this, a
    # fine-tuned checkpoint trained with activation checkpointing and dropout off until the first evaluation
    model.train()
    spec.share(model=model, reference_model=reference_model)
    data = spec.finish_data(spec.build_data(assets, model))
    spec.share(
        train_loader=data.train_loader,
        eval_batches=data.eval_batches,
        data_reports=data.reports,
        collator=data.collator,
    )
    train_module = spec.build_train_module(TrainInputs(assets, model, reference_model, data))
    trainer: Trainer | None = None  # built below, from the callbacks that take the outputs

    def persist(path: str) -> None:
        assert trainer is not None, "a file persisted before the Trainer was built"
        trainer.persist_working_file(path)

    outputs = spec.outputs_class(
        config=spec.saved_config,
        model=model,
        processor=assets.processor,
        device=spec.device,
        data_reports=data.reports,
        persist=persist,
        collator=data.collator,
    )
    parts = RunParts(
        config=spec.saved_config,
        device=spec.device,
        precision=spec.precision,
        parallel_dims=spec.parallel_dims,
        assets=assets,
        model=model,
        reference_model=reference_model,
        data=data,
        train_module=train_module,
        outputs=outputs,
        held_out_answers=lambda: spec.held_out_answers(assets),
    )
    spec.share(train_module=train_module, outputs=outputs, parts=parts)
    trainer = spec.build_trainer(parts)
    check_shared_folder(config.trainer.save_folder)  # several machines: one folder all of them see
    if is_rank0():
        trainer.write_file("config.yaml", to_yaml(parts.config))  # secrets redacted; makes the folder
    total, trainable = count_parameters(model), count_parameters(model, trainable_only=True)
    share = "" if trainable == total else f" ({trainable:,} trainable)"
    print0(
        f"model: {total:,} parameters{share} | device {describe_device(spec.device)} | "
        f"precision {spec.precision} | attention {spec.models.describe_attention()} | parallel {layout} | "
        f"dropout {'off' if spec.models.disable_dropout else 'on'} | save folder {config.trainer.save_folder}"
    )
    return parts, trainer


def run_assets(spec: Recipe) -> ModelAssets:
    """The model assets the run is built over: the spec's ``model_assets()``, or what a ``build_model_assets``
    written in another system's form (which keeps them on the recipe) kept there."""
    # a recipe adapter marks the user's build_model_assets it completed (honing.extensions.RECIPE_ADAPTERS)
    if getattr(type(spec).build_model_assets, "completes_tokenizer", False):
        spec.build_model_assets()
        return ModelAssets(spec.processor, spec.tokenizer, getattr(spec, "chat_template", None))
    assets = spec.model_assets()
    spec.share(processor=assets.processor, tokenizer=assets.tokenizer, chat_template=assets.chat_template)
    return assets


def data_alone(spec: Recipe) -> tuple[ModelAssets, RunData]:
    """The model assets and the data as training would make them, with no model (``honing data``)."""
    assets = run_assets(spec)
    return assets, spec.build_data(assets)


def configure_storage(cfg: StorageSection) -> None:
    """Credentials and endpoint from the ``storage`` section for every ``s3://`` path of this process."""
    storage.set_storage_options(
        "s3",
        **storage.s3_storage_options(
            endpoint_url=cfg.endpoint_url,
            aws_access_key_id=cfg.aws_access_key_id,
            aws_secret_access_key=cfg.aws_secret_access_key,
            region=cfg.region,
        ),
    )
