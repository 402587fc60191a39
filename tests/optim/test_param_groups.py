from honing.optim.param_groups import build_adamw, build_param_groups
from tests.helpers import tiny_llama


def test_no_decay_for_norms_biases_embeddings():
    model = tiny_llama()
    groups = {g["name"]: g for g in build_param_groups(model, weight_decay=0.1)}
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {names[id(p)] for p in groups["no_decay"]["params"]}
    decay = {names[id(p)] for p in groups["decay"]["params"]}
    assert "model.embed_tokens.weight" in no_decay
    assert "model.norm.weight" in no_decay
    assert "model.layers.0.self_attn.q_proj.weight" in decay
    assert groups["decay"]["weight_decay"] == 0.1 and groups["no_decay"]["weight_decay"] == 0.0
    assert len(decay) + len(no_decay) == len(list(model.parameters()))


def test_adamw_remembers_initial_lr():
    optimizer = build_adamw(tiny_llama(), lr=0.01, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    assert all(group["initial_lr"] == 0.01 for group in optimizer.param_groups)
