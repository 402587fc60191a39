"""The streamed export writes what ``save_pretrained`` writes (keys, dtypes, values), layer by layer: for dense,
tied, biased, mixture-of-experts and vision-language families, LoRA merged, a quantized base de-quantized, and in
several shards that transformers loads back."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

from honing.export.hf_folder import export_hf, merged_model
from honing.export.safetensors_writer import INDEX_FILE, ShardedWriter, TensorSpec
from honing.export.streamed import StreamedExport
from honing.models.lora import apply_lora
from honing.models.quantize import quantize_model
from honing.models.tiny_vl import tiny_vl_config
from tests.helpers import tiny_llama
from tests.models.lora_fixtures import LORA, VOCAB, logits, trained_lora_model

pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)


def saved_tensors(folder) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face folder's safetensors files, by name."""
    tensors = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), "pt") as handle:
                tensors.update({key: handle.get_tensor(key) for key in handle.keys()})
    return tensors


def assert_same_checkpoint(streamed, reference):
    """The same keys, dtypes and values in both folders."""
    ours, theirs = saved_tensors(streamed), saved_tensors(reference)
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype, key
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0, msg=key)


def causal_lm(model_type: str, **overrides):
    experts = {"num_local_experts": 4} if model_type == "mixtral" else {"num_experts": 4}
    moe = {**experts, "num_experts_per_tok": 2} if model_type in ("mixtral", "qwen3_moe") else {}
    config = AutoConfig.for_model(model_type, **TINY, vocab_size=64, **moe, **overrides)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("llama", {"tie_word_embeddings": False}),
        ("llama", {"tie_word_embeddings": True}),
        ("qwen2", {}),  # biased attention projections
        ("mixtral", {}),  # experts stacked in memory, one tensor per expert on disk
        ("qwen3_moe", {}),
    ],
)
def test_a_plain_model_streams_to_what_save_pretrained_writes(tmp_path, model_type, overrides):
    model = causal_lm(model_type, **overrides)
    model.save_pretrained(tmp_path / "reference")
    export_hf(model, None, str(tmp_path / "streamed"))
    assert_same_checkpoint(tmp_path / "streamed", tmp_path / "reference")
    assert json.loads((tmp_path / "streamed" / "config.json").read_text()) == json.loads(
        (tmp_path / "reference" / "config.json").read_text()
    )
    assert sorted(os.listdir(tmp_path / "streamed")) == sorted(os.listdir(tmp_path / "reference"))


def test_a_vision_language_model_keeps_its_checkpoint_names(tmp_path):
    config = tiny_vl_config("qwen2_vl")
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    model.save_pretrained(tmp_path / "reference")
    export_hf(model, None, str(tmp_path / "streamed"))
    assert_same_checkpoint(tmp_path / "streamed", tmp_path / "reference")


def test_a_lora_model_streams_merged_with_its_saved_modules(tmp_path):
    model = trained_lora_model()
    merged_model(model).save_pretrained(tmp_path / "reference")
    export_hf(model, None, str(tmp_path / "streamed"))
    assert_same_checkpoint(tmp_path / "streamed", tmp_path / "reference")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "streamed").eval()
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_a_quantized_lora_model_streams_de_quantized_and_merged(tmp_path, kind):
    pytest.importorskip("torchao")
    base = tiny_llama(vocab=VOCAB, seed=0, hidden_size=64, intermediate_size=128)
    quantize_model(base, kind, device=torch.device("cpu"))
    model = apply_lora(base, **{**LORA, "modules_to_save": None})
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(0.2 * torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    reference = merged_model(model)  # the whole de-quantized copy, merged: what the export streams instead
    reference.save_pretrained(tmp_path / "reference")
    export_hf(model, None, str(tmp_path / "streamed"))
    assert_same_checkpoint(tmp_path / "streamed", tmp_path / "reference")


def test_several_shards_load_back_through_the_index(tmp_path):
    model = causal_lm("llama", tie_word_embeddings=False)
    export = StreamedExport(model)
    os.makedirs(tmp_path / "hf")
    model.config.save_pretrained(tmp_path / "hf")
    export.write(str(tmp_path / "hf"), max_shard_bytes=20_000)  # a few layers' tensors per shard
    files = sorted(name for name in os.listdir(tmp_path / "hf") if name.endswith(".safetensors"))
    assert len(files) > 3 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((tmp_path / "hf" / INDEX_FILE).read_text())
    assert set(index["weight_map"].values()) == set(files)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


def test_layers_are_groups_in_model_order():
    groups = StreamedExport(causal_lm("llama", tie_word_embeddings=False)).groups()
    assert groups[0] == ["model.embed_tokens.weight"]
    assert all(key.startswith("model.layers.0.") for key in groups[1])
    assert all(key.startswith("model.layers.1.") for key in groups[2])
    assert groups[-2:] == [["model.norm.weight"], ["lm_head.weight"]]


def test_the_writer_refuses_a_tensor_its_header_did_not_promise(tmp_path):
    writer = ShardedWriter(str(tmp_path), [TensorSpec("a", torch.float32, (2,))], max_shard_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="expected"):
        writer.write("a", torch.zeros(3))
    writer = ShardedWriter(str(tmp_path), [TensorSpec("a", torch.float32, (2,))], max_shard_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="never came"):
        writer.close()


def test_bf16_and_integer_tensors_keep_their_bytes(tmp_path):
    tensors = {"w": torch.randn(3, 5).to(torch.bfloat16), "ids": torch.arange(7), "flag": torch.tensor([True, False])}
    specs = [TensorSpec(name, value.dtype, tuple(value.shape)) for name, value in tensors.items()]
    writer = ShardedWriter(str(tmp_path), specs, max_shard_bytes=1 << 20)
    for name, value in tensors.items():
        writer.write(name, value)
    writer.close()
    saved = saved_tensors(tmp_path)
    for name, value in tensors.items():
        assert torch.equal(saved[name], value), name


@pytest.mark.parametrize("fan_in_fan_out", [False, True])
def test_a_weight_merged_in_blocks_of_rows_equals_the_whole_merge(monkeypatch, fan_in_fan_out):
    from honing.export import streamed

    generator = torch.Generator().manual_seed(0)
    base = torch.randn(24, 10, generator=generator).to(torch.bfloat16)
    out_features, in_features = (10, 24) if fan_in_fan_out else (24, 10)
    lora_a = torch.randn(4, in_features, generator=generator)
    lora_b = torch.randn(out_features, 4, generator=generator)
    delta = (lora_b @ lora_a) * 0.5
    whole = (base.float() + (delta.T if fan_in_fan_out else delta)).to(torch.bfloat16)
    monkeypatch.setattr(streamed, "MERGE_BLOCK", 25)  # 2 rows of 10 at a time
    blocks = streamed.merged_weight(base, lora_a, lora_b, 0.5, fan_in_fan_out)
    assert torch.equal(blocks, whole)


def test_full_model_export_leaves_peft_unimported(tmp_path):
    """Exporting a model without LoRA does not import peft (which imports bitsandbytes, whose CPU backend logs a
    warning at import on AVX-512 BF16 machines without the ``kernels`` package): the quickstart's output stays clean."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from transformers import AutoConfig, AutoModelForCausalLM\n"
        "from honing.export.streamed import StreamedExport\n"
        "config = AutoConfig.for_model('llama', hidden_size=32, num_hidden_layers=1, num_attention_heads=2,\n"
        "    num_key_value_heads=2, intermediate_size=64, vocab_size=64)\n"
        f"StreamedExport(AutoModelForCausalLM.from_config(config)).write({str(tmp_path)!r})\n"
        "print(sorted(name for name in ('peft', 'bitsandbytes') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert os.path.isfile(tmp_path / "model.safetensors")
