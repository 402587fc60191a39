"""``parallel.compile: auto`` (the default): on CUDA unless the method would recompile every step, off on CPU, an
explicit true or false as written; the header line says which and why."""

from types import SimpleNamespace

import pytest
import torch

from honing.config.parallel_schema import ParallelSection
from honing.models.compile_choice import choose_compile
from honing.recipes.base import Recipe
from honing.recipes.distill import DistillRecipe
from honing.recipes.grpo import GRPORecipe
from honing.recipes.pair_parts import packed_pairs

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def test_auto_is_the_default_and_compiles_on_cuda_only():
    assert ParallelSection().compile == "auto"
    on_gpu, on_cpu = choose_compile("auto", CUDA), choose_compile("auto", CPU)
    assert on_gpu.enabled and on_gpu.automatic and "auto -> on" in on_gpu.line
    assert not on_cpu.enabled and "auto -> off (cpu" in on_cpu.line


@pytest.mark.parametrize("setting", [True, False])
def test_an_explicit_setting_is_kept_on_any_device_and_any_method(setting):
    for device in (CUDA, CPU):
        choice = choose_compile(setting, device, blockers=["the rollouts' decoding"])
        assert choice.enabled is setting and not choice.automatic
        assert choice.line == f"parallel.compile: {str(setting).lower()}"


def test_what_would_recompile_each_step_turns_auto_off_and_is_named():
    choice = choose_compile("auto", CUDA, blockers=["packed preference pairs"])
    assert not choice.enabled and "packed preference pairs would recompile" in choice.line


def test_each_method_names_its_blockers():
    assert GRPORecipe.compile_blockers(SimpleNamespace()) == ["the rollouts' decoding"]
    assert DistillRecipe.compile_blockers(SimpleNamespace(distill=SimpleNamespace(lmbda=0.5))) == [
        "the student's decoding"
    ]
    assert DistillRecipe.compile_blockers(SimpleNamespace(distill=SimpleNamespace(lmbda=0.0))) == []
    assert Recipe.compile_blockers(SimpleNamespace(packed_pairs=True)) == ["packed preference pairs"]
    assert Recipe.compile_blockers(SimpleNamespace()) == []  # pretraining, SFT


def test_packed_pairs_stay_on_under_auto_and_go_off_under_an_explicit_true(capsys):
    section = SimpleNamespace(packed_pairs=True)
    config = SimpleNamespace(method="dpo", parallel=SimpleNamespace(compile="auto"))
    assert packed_pairs(config, section) is True
    config.parallel.compile = True
    assert packed_pairs(config, section) is False
    assert "packed_pairs is off under parallel.compile" in capsys.readouterr().out
