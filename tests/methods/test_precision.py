import torch

from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import TokenDataset, tiny_llama


def train_steps(precision, steps=5):
    model = tiny_llama(seed=2)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    module = LMTrainModule(
        model,
        build_adamw(model, lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        micro_batch_size=4,
        precision=precision,
    )
    data = TokenDataset(rows=4, seq_len=16).data
    losses = []
    for _ in range(steps):
        module.zero_grads()
        module.train_batch({"input_ids": data, "labels": data})
        module.optim_step()
        losses.append(module.eval_batch({"input_ids": data, "labels": data}))
    return model, [float(x["loss_sum"] / x["tokens"]) for x in losses]


def test_bf16_mixed_keeps_fp32_weights_and_learns():
    model, losses = train_steps("bf16-mixed")
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < losses[0]
    _, fp32_losses = train_steps("fp32")
    assert abs(losses[-1] - fp32_losses[-1]) < 0.1  # bf16 matmuls, same trajectory within rounding


def test_pure_bf16_trains_in_bf16():
    model, losses = train_steps("bf16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert losses[-1] < losses[0]
