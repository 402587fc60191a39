import torch

from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import TokenDataset, tiny_llama


def one_step(micro_batch_size: int, labels_mask=None, dtype=torch.float32, return_grads=False):
    model = tiny_llama(seed=1).to(dtype)
    optimizer = build_adamw(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    module = LMTrainModule(model, optimizer, micro_batch_size=micro_batch_size, grad_clip=1.0)
    data = TokenDataset(rows=8, seq_len=16).data
    labels = data.clone()
    if labels_mask is not None:
        labels[labels_mask] = -100
    module.zero_grads()
    module.train_batch({"input_ids": data, "labels": labels})
    if return_grads:
        return torch.cat([p.grad.flatten() for p in model.parameters()])
    module.optim_step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_gradient_accumulation_invariance():
    # 1 micro-batch of 8 rows vs 4 micro-batches of 2 rows: the same gradient within 1e-6 in fp32 ...
    assert (one_step(8, return_grads=True) - one_step(2, return_grads=True)).abs().max().item() < 1e-6
    # ... and the same AdamW update within 1e-6. In fp32, Adam's first step (≈ lr·sign(g)) turns
    # rounding noise in near-zero gradients into visible differences, so the update is compared in fp64.
    assert (one_step(8, dtype=torch.float64) - one_step(2, dtype=torch.float64)).abs().max().item() < 1e-6


def test_gradient_accumulation_invariance_with_uneven_target_counts():
    # rows with different numbers of target tokens: normalising per micro-batch would differ
    mask = torch.zeros(8, 16, dtype=torch.bool)
    mask[0, 2:] = True
    mask[5, 9:] = True
    assert (one_step(8, mask, return_grads=True) - one_step(2, mask, return_grads=True)).abs().max().item() < 1e-6
    assert (one_step(8, mask, torch.float64) - one_step(2, mask, torch.float64)).abs().max().item() < 1e-6


def test_eval_batch_sums():
    model = tiny_llama(seed=1)
    module = LMTrainModule(
        model, build_adamw(model, lr=1e-3, weight_decay=0, betas=(0.9, 0.9), eps=1e-8), micro_batch_size=3
    )
    data = TokenDataset(rows=5, seq_len=16).data
    out = module.eval_batch({"input_ids": data, "labels": data})
    assert out["tokens"].item() == 5 * 15
    with torch.no_grad():
        reference = model(input_ids=data, labels=data).loss.item()  # HF's own mean next-token loss
    assert abs(out["loss_sum"].item() / out["tokens"].item() - reference) < 1e-5


def test_flops_per_token_counts_tied_head():
    model = tiny_llama(tie_word_embeddings=True)
    module = LMTrainModule(
        model, build_adamw(model, lr=1e-3, weight_decay=0, betas=(0.9, 0.9), eps=1e-8), micro_batch_size=1
    )
    params = sum(p.numel() for p in model.parameters())  # embeddings counted once, as the head
    assert module.num_flops_per_token(16) == 6 * params + 12 * 2 * 32 * 16
