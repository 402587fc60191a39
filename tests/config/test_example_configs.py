"""The example configs that cannot run here (several machines, hub models) are still checked: every key is valid
for its method and the parallel layout fits the machines it names."""

from pathlib import Path

from honing.config import load_config, validate
from honing.parallel_dims import parallel_dims_from

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_the_two_node_7b_config_is_valid_and_its_layout_fits_16_gpus():
    config = load_config(str(CONFIGS / "multinode" / "sft-7b-2x8.yaml"), [])
    dims = parallel_dims_from(config.parallel, world_size=2 * 8)
    assert (dims.dp_replicate, dims.dp_shard, dims.tp) == (2, 4, 2)
    assert dims.dp_size == 8 and config.data.global_batch_size % dims.dp_size == 0


def test_the_qlora_example_is_the_lora_example_on_nf4_weights():
    qlora = load_config(str(CONFIGS / "sft-qlora.yaml"), [])
    lora = load_config(str(CONFIGS / "sft-lora.yaml"), [])
    assert qlora.model.quantize == "nf4" and qlora.model.lora == lora.model.lora
    assert qlora.data == lora.data and qlora.optim == lora.optim


def test_the_reference_free_examples_learn_the_dpo_examples_pairs_with_no_reference():
    dpo = load_config(str(CONFIGS / "dpo.yaml"), [])
    orpo, simpo = (load_config(str(CONFIGS / name), []) for name in ("orpo.yaml", "simpo.yaml"))
    assert (orpo.method, simpo.method, simpo.cpo.loss_type) == ("orpo", "cpo", "simpo")
    for config in (orpo, simpo):
        assert config.data == dpo.data and config.model == dpo.model and config.dpo is None


def test_the_tool_use_config_is_the_grpo_stage_its_example_measured():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tool_grpo", CONFIGS.parent / "examples" / "tool_grpo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    measured = validate(example.grpo_config(Path("runs/grpo-tools"), "m", "p", "h", 60, None))
    config = load_config(str(CONFIGS / "grpo-tools.yaml"), [])
    assert config.grpo == measured.grpo and config.grpo.tools == ["calculator"]
    assert config.optim.lr == measured.optim.lr and config.data.seq_len == measured.data.seq_len
    assert config.data.global_batch_size == measured.data.global_batch_size
    assert config.callbacks.evaluator.interval == measured.callbacks.evaluator.interval
