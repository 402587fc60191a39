"""``honing export --gguf``: a Hugging Face model folder written as one GGUF file that llama.cpp (and ollama, LM
Studio, ...) loads, with f16 or f32 weights (quantize it afterwards with llama.cpp's ``llama-quantize``).

llama.cpp's own converter (``convert_hf_to_gguf.py``) ships in no package that installs here; this one follows its
conventions for the families it names, through the ``gguf`` package (llama.cpp's ``gguf-py``): its tensor name
map, its writer, its vocabulary readers.

- Llama and Mistral: architecture ``llama``. llama.cpp's rotary embedding rotates adjacent pairs (GPT-J style)
  where Hugging Face's rotates the two halves of each head, so the q and k rows of every head are reordered
  (:func:`permute_for_llama_rope`, llama.cpp's ``LlamaModel.permute``). Mistral's ``sliding_window`` is not
  carried, as llama.cpp's converter does not carry it: the ``llama`` architecture attends to the whole context.
- Qwen2: architecture ``qwen2``, whose rotary layout llama.cpp shares with Hugging Face: no reordering.

Anything else (another architecture, rope scaling, a pre-tokenizer llama.cpp cannot reproduce) is refused in one
line rather than written as a file that loads and answers wrongly."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from honing.errors import ConfigError
from honing.export.gguf_vocab import add_vocabulary

if TYPE_CHECKING:
    from gguf import GGUFWriter

#: Hugging Face architecture → llama.cpp architecture
FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
#: the llama.cpp architectures whose q/k rows are reordered for llama.cpp's rotary layout
PERMUTED_ROPE = {"llama"}
OUT_TYPES = ("f16", "f32")
#: buffers a checkpoint may hold that are computed, not learned (llama.cpp recomputes them)
COMPUTED_BUFFERS = ("rotary_emb.inv_freq",)


@dataclass(frozen=True)
class GGUFExport:
    """What was written: the file, its architecture, tensor count and weight type."""

    path: str
    architecture: str
    tensors: int
    out_type: str


def import_gguf() -> ModuleType:
    """The ``gguf`` package, or a one-line error saying how to install it."""
    try:
        import gguf
    except ImportError:
        raise ConfigError("--gguf: the gguf package is not installed; pip install 'honing[gguf]'") from None
    return gguf


def permute_for_llama_rope(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """q or k rows (``heads`` heads of ``head_dim`` rows) from Hugging Face's rotate-half layout to llama.cpp's
    adjacent pairs: within each head, row ``i`` of the first half and row ``i`` of the second become rows ``2i``
    and ``2i + 1`` (llama.cpp's ``LlamaModel.permute``; biases, 1-D, are reordered the same way)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def unpermute_llama_rope(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """The inverse of :func:`permute_for_llama_rope`: llama.cpp's rows back in Hugging Face's order."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def read_config(folder: str) -> dict[str, Any]:
    """``folder/config.json``, checked to be a family this converter writes."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise ConfigError(f"--gguf: {folder} has no config.json; give a Hugging Face model folder or a run folder")
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    architectures = config.get("architectures") or []
    family = next((FAMILIES[name] for name in architectures if name in FAMILIES), None)
    if family is None:
        raise ConfigError(
            f"--gguf: {path} is a {', '.join(architectures) or 'model of no named architecture'}; honing writes GGUF "
            f"for {', '.join(FAMILIES)} (convert others with llama.cpp's convert_hf_to_gguf.py)"
        )
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(
            f"--gguf: {path} scales its rotary embedding ({rope_type!r}); honing writes GGUF for unscaled rope only "
            "(convert it with llama.cpp's convert_hf_to_gguf.py)"
        )
    return config


def weight_files(folder: str) -> list[str]:
    """The safetensors files holding the model's weights (one, or the shards its index names)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
        return [os.path.join(folder, shard) for shard in shards]
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise ConfigError(f"--gguf: {folder} has no model.safetensors (or its index); honing reads safetensors weights")


def export_gguf(folder: str, out_path: str, *, out_type: str = "f16") -> GGUFExport:
    """Write the Hugging Face model in ``folder`` as the GGUF file ``out_path``."""
    gguf = import_gguf()
    if out_type not in OUT_TYPES:
        raise ConfigError(f"--outtype: expected one of {', '.join(OUT_TYPES)}, got {out_type!r}")
    config = read_config(folder)
    family = next(FAMILIES[name] for name in config["architectures"] if name in FAMILIES)
    arch = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == family)
    blocks = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    names = gguf.get_tensor_name_map(arch, blocks)
    writer = gguf.GGUFWriter(out_path, family)
    add_hyperparameters(writer, gguf, config, heads, kv_heads, out_type, folder)
    add_vocabulary(writer, gguf, folder, int(config["vocab_size"]))
    count = 0
    from safetensors import safe_open

    for path in weight_files(folder):
        with safe_open(path, framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open is no mapping)
                if name.endswith(COMPUTED_BUFFERS):
                    continue
                tensor = weights.get_tensor(name).float()
                gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
                if gguf_name is None:
                    raise ConfigError(
                        f"--gguf: {path} holds {name}, which llama.cpp's {family} architecture has no place for "
                        "(a LoRA run's hf/ export is merged; an adapter/ folder is not a model)"
                    )
                if family in PERMUTED_ROPE and name.endswith(("q_proj.weight", "q_proj.bias")):
                    tensor = permute_for_llama_rope(tensor, heads)
                elif family in PERMUTED_ROPE and name.endswith(("k_proj.weight", "k_proj.bias")):
                    tensor = permute_for_llama_rope(tensor, kv_heads)
                # llama.cpp keeps 1-D tensors (norms, biases) in f32 whatever the file's type
                dtype = np.float16 if out_type == "f16" and tensor.dim() > 1 else np.float32
                writer.add_tensor(gguf_name, tensor.numpy().astype(dtype))
                count += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GGUFExport(out_path, family, count, out_type)


def add_hyperparameters(
    writer: GGUFWriter, gguf: ModuleType, config: dict[str, Any], heads: int, kv_heads: int, out_type: str, folder: str
) -> None:
    """The model's shape under llama.cpp's metadata keys (``{arch}.block_count``, ``{arch}.attention.head_count``,
    ...), its name and the file's weight type."""
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    rope = config.get("rope_parameters") or {}
    writer.add_name(os.path.basename(os.path.normpath(folder)))
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(hidden)
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_rope_dimension_count(head_dim)
    if head_dim != hidden // heads:  # llama.cpp assumes hidden / heads unless told
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(int(config["vocab_size"]))
    file_type = gguf.LlamaFileType.MOSTLY_F16 if out_type == "f16" else gguf.LlamaFileType.ALL_F32
    writer.add_file_type(file_type)
