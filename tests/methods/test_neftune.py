"""NEFTune: transformers' noise where rows are whole, each sequence's own length where rows are padded or packed,
and only in training forwards."""

import pytest
import torch
from transformers.integrations.neftune import neftune_post_forward_hook

from honing.config import RunConfig
from honing.methods.lm import LMTrainModule
from honing.methods.neftune import noisy, noisy_embeddings, sequence_lengths
from honing.optim.param_groups import build_adamw
from tests.helpers import TokenDataset, tiny_llama

ALPHA = 5.0


def test_whole_rows_get_transformers_noise_from_the_same_generator():
    model = tiny_llama(seed=1).train()
    ids = TokenDataset(rows=3, seq_len=12).data
    embedding = model.get_input_embeddings()
    embedding.neftune_noise_alpha = ALPHA
    handle = embedding.register_forward_hook(neftune_post_forward_hook)
    torch.manual_seed(7)
    theirs = model(input_ids=ids).logits
    handle.remove()
    torch.manual_seed(7)
    with noisy_embeddings(model, ALPHA, {"input_ids": ids}):
        ours = model(input_ids=ids).logits
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, model(input_ids=ids).logits)  # the hook is gone after the block


def test_per_position_lengths_draw_the_same_numbers():
    embeddings = torch.randn(2, 8, 16)
    torch.manual_seed(3)
    scalar = noisy(embeddings, ALPHA, 8)
    torch.manual_seed(3)
    per_position = noisy(embeddings, ALPHA, torch.full((2, 8), 8))
    assert torch.allclose(scalar, per_position, rtol=0, atol=1e-6)


def test_padded_rows_and_packed_documents_are_scaled_by_their_own_length():
    padded = {
        "input_ids": torch.zeros(2, 6, dtype=torch.long),
        "attention_mask": torch.tensor([[1] * 6, [1] * 2 + [0] * 4]),
    }
    assert sequence_lengths(padded, 6).tolist() == [[6] * 6, [2] * 6]
    packed = {"input_ids": torch.zeros(1, 7, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1]])}
    assert sequence_lengths(packed, 7).tolist() == [[3, 3, 3, 2, 2, 2, 2]]
    hidden = 64
    noise = noisy(torch.zeros(1, 7, hidden), ALPHA, sequence_lengths(packed, 7))[0]
    bounds = [ALPHA / (length * hidden) ** 0.5 for length in (3, 3, 3, 2, 2, 2, 2)]
    for position, bound in enumerate(bounds):
        assert noise[position].abs().max() <= bound
        assert noise[position].abs().max() > 0.8 * bound  # 64 uniform draws reach near the bound


def module_with(alpha):
    model = tiny_llama(seed=2)
    optimizer = build_adamw(model, lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    return LMTrainModule(model, optimizer, micro_batch_size=4, grad_clip=None, neftune_noise_alpha=alpha)


def test_noise_in_training_steps_only():
    data = TokenDataset(rows=4, seq_len=16).data
    batch = {"input_ids": data, "labels": data}
    noisy_module, plain_module = module_with(ALPHA), module_with(None)
    assert noisy_module.eval_batch(batch)["loss_sum"] == plain_module.eval_batch(batch)["loss_sum"]
    for module in (noisy_module, plain_module):
        torch.manual_seed(0)
        module.zero_grads()
        module.train_batch(batch)
    noisy_grad = noisy_module.model.get_input_embeddings().weight.grad
    assert not torch.equal(noisy_grad, plain_module.model.get_input_embeddings().weight.grad)
    # the generation path (the model's own forward, outside train_batch) is not noised
    assert torch.equal(noisy_module.model(input_ids=data).logits, plain_module.model(input_ids=data).logits)


def config(method, **sft):
    data = {"train": {"sources": [{"path": "x.jsonl"}]}}
    return RunConfig.model_validate({"method": method, "data": data, "model": {"config": {}}, "sft": sft})


def test_the_key_is_sfts():
    assert config("sft", neftune_noise_alpha=5).sft.neftune_noise_alpha == 5.0
    with pytest.raises(ValueError, match="sft: not used by method 'pretrain'"):
        config("pretrain", neftune_noise_alpha=5)
