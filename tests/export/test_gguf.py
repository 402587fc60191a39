"""``honing export --gguf``: tiny Llama and Qwen2 folders written as GGUF files that llama.cpp's own reader (the
``gguf`` package's ``GGUFReader``) opens with every weight under llama.cpp's names, shapes and values, the model's
shape and tokenizer in llama.cpp's metadata keys, and q/k rows in the order llama.cpp's rotary embedding needs."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from honing.data.chat.templates import strip_generation_markers
from honing.errors import ConfigError
from honing.export.gguf import export_gguf, permute_for_llama_rope, unpermute_llama_rope
from honing.export.gguf_vocab import QWEN2_SPLIT, pre_tokenizer_name
from tests.infer.conftest import quickstart_run  # noqa: F401 (a fixture: the quickstart trained 3 steps)
from tests.infer.tiny_chat_model import chat_tokenizer, save_chat_model, tiny_chat_llama

gguf = pytest.importorskip("gguf")

#: Hugging Face's names in one Llama block → llama.cpp's
BLOCK_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
TOP_NAMES["lm_head.weight"] = "output.weight"


def llama_cpp_name(name: str) -> str:
    """llama.cpp's name of a Hugging Face tensor, written out here from llama.cpp's convention."""
    if name in TOP_NAMES:
        return TOP_NAMES[name]
    _, _, block, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{block}.{BLOCK_NAMES[module]}.{kind}"


def field(reader, key):
    return reader.fields[key].contents()


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("gguf") / "llama")


@pytest.mark.parametrize("out_type", ["f32", "f16"])
def test_a_llama_folder_is_a_gguf_file_llama_cpps_reader_opens_whole(llama_folder, tmp_path, out_type):
    out = tmp_path / "model.gguf"
    result = export_gguf(str(llama_folder), str(out), out_type=out_type)
    hf = load_file(llama_folder / "model.safetensors")
    reader = gguf.GGUFReader(out)
    assert len(reader.tensors) == len(hf) == result.tensors  # 2 blocks of 9, embeddings, final norm, output
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    assert set(tensors) == {llama_cpp_name(name) for name in hf}
    heads, kv_heads = 4, 2
    for name, weight in hf.items():
        tensor = tensors[llama_cpp_name(name)]
        assert list(tensor.shape) == list(reversed(weight.shape))  # ggml lists dimensions innermost first
        values = torch.from_numpy(tensor.data.copy()).float()
        assert values.shape == weight.shape
        if name.endswith("q_proj.weight"):
            values = unpermute_llama_rope(values, heads)
        elif name.endswith("k_proj.weight"):
            values = unpermute_llama_rope(values, kv_heads)
        if out_type == "f16" and weight.dim() > 1:
            assert tensor.tensor_type == gguf.GGMLQuantizationType.F16
            assert torch.equal(values, weight.half().float())
        else:  # f32 files, and 1-D tensors (norms) in every file
            assert tensor.tensor_type == gguf.GGMLQuantizationType.F32
            assert torch.equal(values, weight)
    q = tensors["blk.0.attn_q.weight"].data
    assert not torch.equal(torch.from_numpy(q.copy()).float(), hf["model.layers.0.self_attn.q_proj.weight"])


def test_the_metadata_carries_the_models_shape_and_its_tokenizer(llama_folder, tmp_path):
    out = tmp_path / "model.gguf"
    export_gguf(str(llama_folder), str(out), out_type="f32")
    reader = gguf.GGUFReader(out)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "general.file_type") == gguf.LlamaFileType.ALL_F32
    shape = {
        "llama.block_count": 2,
        "llama.context_length": 256,
        "llama.embedding_length": 32,
        "llama.feed_forward_length": 64,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 8,
    }
    assert {key: field(reader, key) for key in shape} == shape
    assert math.isclose(field(reader, "llama.attention.layer_norm_rms_epsilon"), 1e-6, rel_tol=1e-6)
    assert field(reader, "llama.rope.freq_base") == 10000.0
    tokenizer = chat_tokenizer()
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert field(reader, "tokenizer.ggml.model") == "gpt2" and field(reader, "tokenizer.ggml.pre") == "default"
    assert tokens == [tokenizer.convert_ids_to_tokens(index) for index in range(len(tokenizer))]
    types = field(reader, "tokenizer.ggml.token_type")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert types[im_end] == gguf.TokenType.CONTROL and types[ord("a")] == gguf.TokenType.NORMAL
    assert field(reader, "tokenizer.ggml.eos_token_id") == tokenizer.eos_token_id
    template = field(reader, "tokenizer.chat_template")
    assert "{%- generation %}" in tokenizer.chat_template and "{%- generation %}" not in template  # transformers'
    assert template == strip_generation_markers(tokenizer.chat_template)


def rope(x, positions, base, *, adjacent):
    """Rotary embedding of ``x`` (positions × head_dim): Hugging Face's (halves rotated together) or llama.cpp's
    ``llama`` layout (adjacent pairs rotated together)."""
    dim = x.shape[-1]
    angles = positions[:, None] * base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    cos, sin = angles.cos(), angles.sin()
    first, second = (x[:, 0::2], x[:, 1::2]) if adjacent else (x[:, : dim // 2], x[:, dim // 2 :])
    rotated = (first * cos - second * sin, first * sin + second * cos)
    if adjacent:
        return torch.stack(rotated, dim=-1).flatten(1)
    return torch.cat(rotated, dim=-1)


def test_the_reordered_rows_under_llama_cpps_rotary_give_hugging_faces_attention_scores():
    torch.manual_seed(0)
    heads, head_dim, hidden = 2, 8, 16
    q_proj = torch.randn(heads * head_dim, hidden, dtype=torch.float64)
    k_proj = torch.randn(heads * head_dim, hidden, dtype=torch.float64)
    x, positions = torch.randn(5, hidden, dtype=torch.float64), torch.arange(5, dtype=torch.float64)
    for head in range(heads):
        rows = slice(head * head_dim, (head + 1) * head_dim)
        q_hf = rope(x @ q_proj[rows].T, positions, 10000.0, adjacent=False)
        k_hf = rope(x @ k_proj[rows].T, positions, 10000.0, adjacent=False)
        q_cpp = rope(x @ permute_for_llama_rope(q_proj, heads)[rows].T, positions, 10000.0, adjacent=True)
        k_cpp = rope(x @ permute_for_llama_rope(k_proj, heads)[rows].T, positions, 10000.0, adjacent=True)
        assert torch.allclose(q_cpp @ k_cpp.T, q_hf @ k_hf.T)  # every query-key score, every position pair
        assert not torch.allclose(rope(x @ q_proj[rows].T, positions, 10000.0, adjacent=True) @ k_cpp.T, q_hf @ k_hf.T)


def test_a_qwen2_folder_keeps_its_rows_and_biases_and_ties_its_output_to_the_embeddings(tmp_path):
    tokenizer = chat_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer) + 6,  # embedding rows past the tokenizer's last id, as padded vocabularies have
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "qwen2")
    tokenizer.save_pretrained(tmp_path / "qwen2")
    export_gguf(str(tmp_path / "qwen2"), str(tmp_path / "qwen2.gguf"), out_type="f32")
    hf = load_file(tmp_path / "qwen2" / "model.safetensors")
    reader = gguf.GGUFReader(tmp_path / "qwen2.gguf")
    tensors = {tensor.name: torch.from_numpy(tensor.data.copy()) for tensor in reader.tensors}
    assert field(reader, "general.architecture") == "qwen2"
    assert "lm_head.weight" not in hf and "output.weight" not in tensors  # llama.cpp reuses token_embd
    assert len(tensors) == len(hf)
    assert torch.equal(tensors["blk.1.attn_q.weight"], hf["model.layers.1.self_attn.q_proj.weight"])
    assert torch.equal(tensors["blk.1.attn_k.bias"], hf["model.layers.1.self_attn.k_proj.bias"])
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == config.vocab_size and tokens[-1] == f"[PAD{config.vocab_size - 1}]"
    assert field(reader, "tokenizer.ggml.token_type")[-1] == gguf.TokenType.UNUSED


def sentencepiece_style_tokenizer():
    """A Llama-2-style tokenizer: BPE over "▁"-joined words with byte fallback; "b c" merges before "a b"."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{byte:02X}>": 3 + byte for byte in range(256)}
    for piece in ["▁", "a", "b", "c", "h", "i", "bc", "ab", "▁h", "▁hi"]:
        vocab[piece] = len(vocab)
    merges = [("b", "c"), ("a", "b"), ("▁", "h"), ("▁h", "i")]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def llama_cpp_spm(text, tokens, scores):
    """llama.cpp's SentencePiece tokenizer, in short: from single characters, merge the neighbours whose joined text
    is a token of highest score (the leftmost on ties) until none is; characters no token has become bytes."""
    ids = {token: index for index, token in enumerate(tokens)}
    pieces = list("▁" + text.replace(" ", "▁"))
    while True:
        pairs = [(scores[ids[a + b]], -i) for i, (a, b) in enumerate(zip(pieces, pieces[1:])) if a + b in ids]
        if not pairs:
            break
        i = -max(pairs)[1]
        pieces[i : i + 2] = [pieces[i] + pieces[i + 1]]
    return [ids.get(piece) or ids[f"<0x{ord(piece):02X}>"] for piece in pieces]


def test_a_sentencepiece_style_tokenizer_merges_in_llama_cpp_as_in_hugging_face(tmp_path):
    tokenizer = sentencepiece_style_tokenizer()
    tokenizer.save_pretrained(tmp_path / "llama2")
    tiny_chat_llama(len(tokenizer) + 2).save_pretrained(tmp_path / "llama2")
    export_gguf(str(tmp_path / "llama2"), str(tmp_path / "llama2.gguf"))
    reader = gguf.GGUFReader(tmp_path / "llama2.gguf")
    assert field(reader, "tokenizer.ggml.model") == "llama"
    tokens, scores = field(reader, "tokenizer.ggml.tokens"), field(reader, "tokenizer.ggml.scores")
    types = field(reader, "tokenizer.ggml.token_type")
    assert tokens[: len(tokenizer)] == [tokenizer.convert_ids_to_tokens(index) for index in range(len(tokenizer))]
    assert types[1] == gguf.TokenType.CONTROL and types[3 + 0x41] == gguf.TokenType.BYTE
    assert types[-1] == gguf.TokenType.UNUSED and field(reader, "tokenizer.ggml.bos_token_id") == 1
    for text in ("abc", "hi abc", "cab hi bc", "xyz"):  # "abc": "bc" merges first, though "ab" is leftmost
        assert llama_cpp_spm(text, tokens, scores) == tokenizer(text)["input_ids"]


def test_pre_tokenizers_are_named_by_their_split_pattern():
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    assert QWEN2_SPLIT == PRETOKENIZE_REGEX  # the pattern Qwen2's own tokenizer splits with
    merges = {"model": {"type": "BPE", "merges": [["a", "b"]]}}
    split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}}
    qwen2 = {**merges, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, {"type": "ByteLevel"}]}}
    assert pre_tokenizer_name(qwen2, "tokenizer.json") == "qwen2"
    assert pre_tokenizer_name({**merges, "pre_tokenizer": {"type": "ByteLevel"}}, "tokenizer.json") == "gpt-2"
    unknown = {**merges, "pre_tokenizer": {"type": "ByteLevel", "use_regex": False}}  # no split at all
    with pytest.raises(ConfigError, match="does not name"):
        pre_tokenizer_name(unknown, "tokenizer.json")


def test_other_families_and_scaled_rope_are_refused_in_one_line(tmp_path):
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ConfigError, match="GPT2LMHeadModel; honing writes GGUF for LlamaForCausalLM"):
        export_gguf(str(tmp_path / "gpt2"), str(tmp_path / "gpt2.gguf"))
    scaled = save_chat_model(tmp_path / "scaled")
    text = (scaled / "config.json").read_text()
    (scaled / "config.json").write_text(text.replace('"rope_type": "default"', '"rope_type": "llama3"'))
    with pytest.raises(ConfigError, match="'llama3'"):
        export_gguf(str(scaled), str(tmp_path / "scaled.gguf"))


def test_honing_export_gguf_writes_a_checkpoints_model(quickstart_run, tmp_path, capsys):  # noqa: F811
    from honing.cli import main

    out = tmp_path / "files" / "quickstart.gguf"
    assert main(["export", str(quickstart_run / "step3"), str(out), "--gguf", "--outtype", "f32"]) == 0
    assert f"to {out}" in capsys.readouterr().out
    reader = gguf.GGUFReader(out)
    assert len(reader.tensors) == len(load_file(quickstart_run / "hf" / "model.safetensors"))
    assert sorted(path.name for path in out.parent.iterdir()) == ["quickstart.gguf"]  # no staging left behind
