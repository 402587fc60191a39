"""An Oumi ``TRL_GRPO`` config's batch on 1, 2 and 4 processes: honing trains on as many prompts per optimizer step
and per generation, and as many optimizer steps, as TRL's own ``GRPOConfig`` computes at that world size (its
``world_size`` monkeypatched; honing's global batch follows the data-parallel size at launch)."""

from __future__ import annotations

import pytest
from trl import GRPOConfig

from honing.config import validate
from honing.errors import ConfigError
from honing.interop.configs import translate
from honing.interop.configs.trl_args import translate_trl_args
from honing.methods.grpo import GRPOTrainModule
from honing.methods.grpo_rollouts import GroupSampler
from honing.parallel_dims import ParallelDims
from honing.plan.rollout_batch import generation_steps, shared_groups
from honing.recipes.grpo import GRPORecipe
from tests.recipes.test_grpo import grpo_raw

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers on TRL's gradient_checkpointing


def oumi_grpo(per_device: int, accumulation: int, generations: int, **trainer_kwargs) -> dict:
    """An Oumi TRL_GRPO config with this batch (``trainer_kwargs``: TRL's GRPOConfig arguments)."""
    training = {
        "trainer_type": "TRL_GRPO",
        "per_device_train_batch_size": per_device,
        "gradient_accumulation_steps": accumulation,
        "grpo": {"num_generations": generations},
        "reward_functions": ["soft_20tokens_completions"],
    }
    if trainer_kwargs:
        training["trainer_kwargs"] = trainer_kwargs
    return {"model": {"model_name": "m"}, "data": {"train": {"datasets": [{"dataset_name": "trl-lib/tldr"}]}},
            "training": training}  # fmt: skip


def trl_config(monkeypatch, world: int, per_device: int, accumulation: int, generations: int, **kwargs) -> GRPOConfig:
    """TRL's GRPOConfig as ``world`` processes see it."""
    monkeypatch.setattr(GRPOConfig, "world_size", property(lambda self: world))
    return GRPOConfig(
        output_dir="unused",
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_generations=generations,
        report_to=[],
        bf16=False,
        use_cpu=True,
        **kwargs,
    )


@pytest.mark.parametrize(
    ("per_device", "accumulation", "generations", "kwargs"),
    [
        (8, 1, 8, {}),  # Oumi's per-device default: one prompt per process
        (16, 2, 4, {}),
        (4, 2, 8, {"steps_per_generation": 8, "num_iterations": 2}),  # 4 optimizer steps a generation, twice
        (6, 4, 3, {"steps_per_generation": 4}),
    ],
)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_prompts_and_optimizer_steps_per_generation_are_trls_at_any_world_size(
    monkeypatch, world, per_device, accumulation, generations, kwargs
):
    translation = translate(oumi_grpo(per_device, accumulation, generations, **kwargs))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    trl = trl_config(monkeypatch, world, per_device, accumulation, generations, **kwargs)
    steps = generation_steps(config, config.grpo, world)  # the launch check passes on this many ranks
    prompts = config.data.rows_per_step(world)  # one rollout batch: one generation
    assert prompts == trl.generation_batch_size // generations
    assert steps * config.grpo.num_iterations == trl.steps_per_generation * trl.num_iterations // accumulation
    # TRL's prompts per optimizer step: per device x processes x accumulation / G (a group may span processes)
    assert prompts // steps == per_device * world * accumulation // generations


def test_a_generation_of_fewer_batches_than_the_accumulation_is_one_of_the_whole_step(monkeypatch):
    """TRL samples 2 generations per optimizer step (no update between them: the same policy); honing one."""
    config = validate(translate(oumi_grpo(8, 4, 8, steps_per_generation=2)).config, source="oumi")
    for world in (1, 2, 4):
        assert config.data.rows_per_step(world) == 8 * world * 4 // 8  # prompts per optimizer step, as TRL's
        assert generation_steps(config, config.grpo, world) == 1


def test_trls_optimizer_steps_become_rollout_batches_of_that_many_updates():
    raw = oumi_grpo(4, 2, 8, steps_per_generation=8, num_iterations=2)  # 8 optimizer steps per generation
    raw["training"].update(max_steps=96, warmup_steps=16, save_steps=20)
    translation = translate(raw)
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    updates = config.grpo.steps_per_generation * config.grpo.num_iterations
    assert int(config.trainer.max_duration.removesuffix("steps")) * updates == 96  # TRL's optimizer steps
    assert config.scheduler.warmup_steps * updates == 16
    assert config.callbacks.checkpointer.save_interval == 3  # 20 optimizer steps: rounded up to rollout batches
    assert "training.save_steps: 20 optimizer steps: every 3 rollout batches (8 each)" in translation.notes


def test_steps_that_end_inside_a_generation_are_refused_naming_the_key_and_the_fix():
    raw = oumi_grpo(4, 2, 8, steps_per_generation=8)
    raw["training"]["max_steps"] = 98  # 4 optimizer steps per generation (8 per-device batches / 2 accumulated)
    assert translate(raw).refused == [
        "training.max_steps: 98 optimizer steps must be a multiple of the 4 each generation trains (honing's steps "
        "are rollout batches); set it to 100"
    ]


@pytest.mark.parametrize("world", [2, 4])
def test_a_group_split_over_processes_is_written_in_completions_and_checked_at_launch(monkeypatch, world):
    """TRL splits a prompt's group over processes (it gathers the rewards): so does grpo.completions_per_rank, as
    many prompts per generation as TRL's at that world size; one process cannot make a whole group."""
    translation = translate(oumi_grpo(4, 1, 8))
    assert translation.refused == []
    assert any("grpo.completions_per_rank 4, the group spread over ranks" in note for note in translation.notes)
    config = validate(translation.config, source="oumi")
    assert config.grpo.completions_per_rank == 4 and "batch_size_per_rank" not in translation.config["data"]
    trl = trl_config(monkeypatch, world, 4, 1, 8)
    assert shared_groups(config, config.grpo, ParallelDims(world_size=world)).prompts == trl.generation_batch_size // 8
    with pytest.raises(ConfigError, match=r"^grpo.completions_per_rank \(4\) x 1 data-parallel ranks = 4 "):
        shared_groups(config, config.grpo, ParallelDims(world_size=1))
    assert translate(oumi_grpo(4, 2, 8)).config["data"]["batch_size_per_rank"] == 1  # whole groups stay prompts


def test_rloo_refuses_a_group_split_over_processes_naming_the_key():
    raw = {"model_name_or_path": "m", "per_device_train_batch_size": 2, "num_generations": 4}
    refused = [line for line in translate(raw, dialect="trl-rloo").refused if "per_device" in line]
    assert refused == [
        "per_device_train_batch_size: 2 completions per rank per generation are part of a group of num_generations "
        "(4): honing's rloo samples a prompt's whole group on one rank; give a multiple of 4"
    ]


def test_generation_batch_size_depends_on_the_processes_and_is_refused_naming_steps_per_generation():
    refused = translate(oumi_grpo(8, 1, 8, generation_batch_size=64)).refused
    assert refused == [
        "training.trainer_kwargs.generation_batch_size: not translated: its optimizer steps per generation depend "
        "on the processes; give steps_per_generation (generation_batch_size / (per_device_train_batch_size x "
        "processes))"
    ]


def test_the_translated_run_takes_trls_optimizer_steps_and_generations(tmp_path, monkeypatch):
    """TRL: 4 optimizer steps of 4 completions (one prompt), generating 8 completions every 2 of them."""
    raw = oumi_grpo(4, 1, 4, steps_per_generation=2)
    raw["training"]["max_steps"] = 4
    translated = validate(translate(raw).config, source="oumi")
    run = grpo_raw(tmp_path, steps_per_generation=translated.grpo.steps_per_generation)
    del run["data"]["global_batch_size"]
    run["data"].update(batch_size_per_rank=translated.data.batch_size_per_rank, micro_batch_size=1)
    run["trainer"]["max_duration"] = translated.trainer.max_duration
    counts = {"generate": 0, "optim_step": 0}
    for name, owner in (("generate", GroupSampler), ("optim_step", GRPOTrainModule)):
        function = getattr(owner, name)

        def counted(self, *args, _name=name, _function=function, **kwargs):
            counts[_name] += 1
            return _function(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    GRPORecipe(validate(run)).run()
    assert counts == {"generate": 2, "optim_step": 4}  # TRL's generations and max_steps


@pytest.mark.parametrize("world", [1, 2, 4])
def test_an_axolotl_grpo_batch_counts_completions_per_device_as_trl(monkeypatch, world):
    """axolotl hands micro_batch_size x gradient_accumulation_steps (completions) to TRL's GRPOTrainer."""
    raw = {"base_model": "m", "rl": "grpo", "micro_batch_size": 8, "gradient_accumulation_steps": 2, "max_steps": 40,
           "trl": {"num_generations": 4, "num_iterations": 2}}  # fmt: skip
    translation = translate(raw)
    assert not [line for line in translation.refused if line.startswith(("micro_batch_size", "max_steps", "trl."))]
    trl = trl_config(monkeypatch, world, 8, 2, 4, num_iterations=2)
    per_rank, steps = translation.get("data.batch_size_per_rank"), translation.get("grpo.steps_per_generation", 1)
    assert per_rank * world == trl.generation_batch_size // 4  # the prompts of a generation
    updates = steps * translation.get("grpo.num_iterations")
    assert updates == trl.steps_per_generation * trl.num_iterations // 2  # optimizer steps per generation
    assert int(translation.get("trainer.max_duration").removesuffix("steps")) * updates == 40


@pytest.mark.parametrize(("per_device", "accumulation", "generations"), [(4, 2, 8), (2, 4, 4), (6, 2, 4)])
def test_a_per_device_batch_of_part_of_a_group_is_honings_forward_pass_of_completions(
    per_device, accumulation, generations
):
    """TRL's per-device forward below (or across) a group: the group spans forward passes there and here
    (``grpo.micro_batch_completions``); whole groups stay ``data.micro_batch_size`` in prompts."""
    config = translate(oumi_grpo(per_device, accumulation, generations)).config
    assert config["grpo"]["micro_batch_completions"] == per_device
    assert "micro_batch_size" not in config["data"]
    assert config["data"]["batch_size_per_rank"] * generations == per_device * accumulation
    whole = translate(oumi_grpo(2 * generations, 1, generations)).config
    assert whole["data"]["micro_batch_size"] == 2 and "micro_batch_completions" not in whole.get("grpo", {})


def trl_args_run(values: dict, processes: int | None):
    """TRL GRPOConfig arguments translated on ``processes`` processes (no refusal) and validated with rows."""
    translation = translate_trl_args(values, "GRPOConfig", processes)
    assert translation.refused == [], translation.refused
    raw = translation.config
    raw.setdefault("model", {})["name_or_path"] = "tiny"
    raw.setdefault("data", {})["train"] = {"sources": [{"path": "generated:addition_preference?samples=8&seed=0"}]}
    return validate(raw, source="<trl>")


@pytest.mark.parametrize("world", [1, 2, 4])
def test_generation_batch_size_is_trls_generation_and_optimizer_steps_on_the_given_processes(monkeypatch, world):
    batch = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4}
    config = trl_args_run({**batch, "generation_batch_size": 32}, world)
    trl = trl_config(monkeypatch, world, 4, 2, 4, generation_batch_size=32)
    assert config.data.rows_per_step(world) == trl.generation_batch_size // 4  # prompts per generation
    assert generation_steps(config, config.grpo, world) == trl.steps_per_generation // 2  # optimizer steps in it


@pytest.mark.parametrize(
    ("values", "processes", "why"),
    [
        ({"generation_batch_size": 40}, 3, "must be divisible by the global batch size (4 per device x 3 processes"),
        ({"generation_batch_size": 30}, 1, "must be divisible by num_generations (4)"),
        ({"generation_batch_size": 32, "steps_per_generation": 4}, 1, "and steps_per_generation can not both"),
    ],
)
def test_a_generation_batch_size_trl_refuses_is_refused_in_one_line(monkeypatch, values, processes, why):
    batch = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_generations": 4}
    with pytest.raises(ValueError):  # TRL's own GRPOConfig
        trl_config(monkeypatch, processes, 4, 1, 4, **values)
    refused = translate_trl_args({**batch, **values}, "GRPOConfig", processes).refused
    assert len(refused) == 1 and refused[0].startswith("generation_batch_size: ") and why in refused[0]


def test_generation_batch_size_without_the_processes_is_refused_naming_steps_per_generation():
    refused = translate_trl_args({"generation_batch_size": 64}, "GRPOConfig").refused
    assert refused == [
        "generation_batch_size: 64: its per-device batches per generation depend on the processes, which this file "
        "does not give; give steps_per_generation (64 / (8 per device x processes)), or num_processes beside it"
    ]


def test_a_trl_cli_file_gives_generation_batch_size_its_processes():
    values = {"model_name_or_path": "m", "dataset_name": "d", "num_processes": 2, "generation_batch_size": 64}
    translation = translate(values, dialect="trl-grpo")
    assert translation.refused == []
    assert translation.get("grpo.steps_per_generation") == 4  # 64 / (8 per device x 2 processes) optimizer steps
