"""The chunked head's cross-entropy and log-probabilities equal the full-logits ones (honing.losses) and their
gradients, in fp32 within 1e-5, over several chunks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from honing import chunked_ce
from honing.losses import IGNORE_INDEX, completion_logps, count_correct, token_logps

VOCAB, HIDDEN = 50, 8


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(chunked_ce, "CHUNK_ROWS", 3)  # several chunks, the last one short


def leaves(bias: bool = True, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 9, HIDDEN, generator=generator, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator, requires_grad=True)
    bias_ = torch.randn(VOCAB, generator=generator, requires_grad=True) if bias else None
    return hidden, weight, bias_


def grads(*tensors):
    return [t.grad.clone() for t in tensors if t is not None]


def assert_close(actual, expected, tol=1e-5):
    for a, e in zip(actual, expected, strict=True):
        assert (a - e).abs().max().item() < tol


def targets_with_ignored(seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, VOCAB, (2, 9), generator=generator)
    targets[0, :4] = IGNORE_INDEX  # a prompt
    targets[1, 7:] = IGNORE_INDEX  # padding
    return targets


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("grad_scale", [1.0, 0.25])
def test_cross_entropy_sum_and_gradients_equal_the_full_logits(bias, grad_scale):
    targets = targets_with_ignored()
    hidden, weight, bias_ = leaves(bias)
    plain = F.cross_entropy(F.linear(hidden, weight, bias_).reshape(-1, VOCAB), targets.reshape(-1), reduction="sum")
    plain.backward(torch.tensor(grad_scale))
    expected = grads(hidden, weight, bias_)

    hidden, weight, bias_ = leaves(bias)
    loss = chunked_ce.linear_cross_entropy_sum(hidden, weight, bias_, targets, grad_scale=grad_scale)
    loss.backward(torch.tensor(grad_scale))
    assert abs(loss.item() - plain.item()) < 1e-5
    assert_close(grads(hidden, weight, bias_), expected)


def test_cross_entropy_backward_with_another_factor_than_announced():
    targets = targets_with_ignored()
    hidden, weight, bias_ = leaves()
    logits = F.linear(hidden, weight, bias_).reshape(-1, VOCAB)
    (F.cross_entropy(logits, targets.reshape(-1), reduction="sum") * 3).backward()
    expected = grads(hidden, weight, bias_)
    hidden, weight, bias_ = leaves()
    (chunked_ce.linear_cross_entropy_sum(hidden, weight, bias_, targets, grad_scale=0.5) * 3).backward()
    assert_close(grads(hidden, weight, bias_), expected)


def test_frozen_head_gets_no_gradient_and_the_hidden_states_do():
    targets = targets_with_ignored()
    hidden, weight, _ = leaves(bias=False)
    weight.requires_grad_(False)
    chunked_ce.linear_cross_entropy_sum(hidden, weight, None, targets).backward()
    assert weight.grad is None and hidden.grad is not None
    assert (hidden.grad[0, :4] == 0).all()  # positions without a target get nothing


def test_no_target_at_all_still_back_propagates_zeros():
    hidden, weight, _ = leaves(bias=False)
    loss = chunked_ce.linear_cross_entropy_sum(hidden, weight, None, torch.full((2, 9), IGNORE_INDEX))
    loss.backward()
    assert loss.item() == 0 and (hidden.grad == 0).all() and (weight.grad == 0).all()


def test_eval_sums_equal_the_full_logits():
    targets = targets_with_ignored()
    hidden, weight, bias_ = leaves()
    logits = F.linear(hidden, weight, bias_).detach()
    targets[:, ::2] = torch.where(targets[:, ::2] == IGNORE_INDEX, IGNORE_INDEX, logits.argmax(-1)[:, ::2])
    loss, correct = chunked_ce.linear_cross_entropy_eval(hidden, weight, bias_, targets)
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), reduction="sum")
    assert abs(loss.item() - expected.item()) < 1e-5
    # count_correct takes unshifted labels: position t's target is label t+1
    labels = torch.cat([torch.zeros(2, 1, dtype=torch.long), targets], dim=1)
    assert correct.item() == count_correct(torch.cat([logits, logits[:, :1]], dim=1), labels).item() >= 4


def test_completion_logps_and_gradients_equal_the_full_logits():
    # K = 2 completions sharing positions (DPO's chosen and rejected), each ignored somewhere
    generator = torch.Generator().manual_seed(3)
    targets = torch.randint(0, VOCAB, (2, 9, 2), generator=generator)
    targets[:, :3] = IGNORE_INDEX
    targets[0, 6:, 0] = IGNORE_INDEX
    targets[1, 4:6, 1] = IGNORE_INDEX
    upstream = torch.randn(2, 2, generator=generator)
    hidden, weight, bias_ = leaves()
    plain, plain_counts = completion_logps(F.linear(hidden, weight, bias_), targets)
    (plain * upstream).sum().backward()
    expected = grads(hidden, weight, bias_)
    hidden, weight, bias_ = leaves()
    logps, counts = chunked_ce.completion_logps(hidden, weight, bias_, targets)
    (logps * upstream).sum().backward()
    assert_close([logps], [plain])
    assert torch.equal(counts, plain_counts)
    assert_close(grads(hidden, weight, bias_), expected)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logps_and_gradients_equal_the_full_logits_where_masked_in(temperature):
    generator = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, VOCAB, (2, 9), generator=generator)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 5:] = 0  # a completion that ended early
    upstream = torch.randn(2, 9, generator=generator) * mask
    hidden, weight, bias_ = leaves()
    plain = token_logps(F.linear(hidden, weight, bias_), tokens, temperature)
    (plain * upstream).sum().backward()
    expected = grads(hidden, weight, bias_)
    hidden, weight, bias_ = leaves()
    logps = chunked_ce.token_logps(hidden, weight, bias_, tokens, mask, temperature)
    (logps * upstream).sum().backward()
    assert_close([logps * mask], [plain * mask])
    assert (logps[1, 5:] == 0).all()
    assert_close(grads(hidden, weight, bias_), expected)


def test_chunk_rows_keep_a_chunk_of_logits_within_budget(monkeypatch):
    monkeypatch.setattr(chunked_ce, "CHUNK_ROWS", None)
    rows = chunked_ce.chunk_rows(151_936)
    assert rows >= 1 and rows * 151_936 * 4 <= chunked_ce.CHUNK_BYTES
    assert chunked_ce.chunk_rows(10**12) == 1


def test_bf16_autocast_runs_the_matmul_in_bf16_like_the_plain_head():
    targets = targets_with_ignored()
    hidden, weight, bias_ = leaves()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = F.cross_entropy(
            F.linear(hidden, weight, bias_).float().reshape(-1, VOCAB), targets.reshape(-1), reduction="sum"
        )
        loss = chunked_ce.linear_cross_entropy_sum(hidden, weight, bias_, targets)
        assert chunked_ce.matmul_dtype(hidden, weight) == torch.bfloat16
    assert loss.dtype == torch.float32
    assert abs(loss.item() - plain.item()) < 1e-3 * abs(plain.item())


def test_a_gpu_chunk_holds_more_positions_and_the_planner_counts_the_same_budgets(monkeypatch):
    from honing.plan import estimate

    monkeypatch.setattr(chunked_ce, "CHUNK_ROWS", None)
    cpu, cuda = chunked_ce.chunk_rows(151_936), chunked_ce.chunk_rows(151_936, torch.device("cuda"))
    assert cpu == 220 and cuda == 1766  # 128 MiB and 1 GiB of fp32 logits
    assert chunked_ce.chunk_rows(151_936, torch.device("cpu")) == cpu
    assert (estimate.CHUNK_BYTES, estimate.CUDA_CHUNK_BYTES) == (chunked_ce.CHUNK_BYTES, chunked_ce.CUDA_CHUNK_BYTES)
