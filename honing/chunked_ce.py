"""Cross-entropy and log-probabilities of a linear LM head over chunks of positions: the full logits never exist.

With a 151,936-token vocabulary one row of 4,096 positions has 2.5 GB of fp32 logits, and the plain path keeps
three tensors of that size alive (logits, log-softmax, their gradient). Here the head runs on a chunk of positions
at a time, only at positions that carry a target, as Liger's fused linear cross-entropy does in portable PyTorch:

- the summed cross-entropy (pretraining, SFT) computes its gradients in the forward pass, chunk by chunk, with the
  scale its backward will be called with, so the step costs the plain path's three head matmuls and keeps only
  (positions × hidden) and (vocabulary × hidden) gradients; liger-kernel's kernel does the same on CUDA when it is
  installed. When one chunk holds every position (small vocabularies) it is the plain path itself (the head and
  ATen's cross-entropy), whose logits then fit the chunk budget;
- log-probabilities whose upstream gradient is not known in the forward (DPO, GRPO) recompute each chunk's logits in
  backward (``torch.utils.checkpoint`` per chunk).

The maths mirror ``honing.losses`` (the same log-softmax and gradient formulas, in the matmul dtype autocast would
pick, the softmax in fp32), so the two paths agree to rounding.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from honing.losses import IGNORE_INDEX

#: the fp32 logits one chunk may hold; two such tensors are alive at a time (the logits and their log-softmax)
CHUNK_BYTES = 128 * 2**20
#: the same on a GPU: at 128 MiB a 151,936-token vocabulary gives 220-position chunks, whose small head matmuls and
#: per-chunk softmax kernels made an H100 step 1.5x slower than the full logits (benchmarks/RESULTS.md, gpu.py)
CUDA_CHUNK_BYTES = 1024 * 2**20
#: rows per chunk when set (tests use it to force several chunks); None: from the byte budget and the vocabulary
CHUNK_ROWS: int | None = None


def chunk_rows(vocab_size: int, device: torch.device | None = None) -> int:
    """Positions per chunk: as many as keep a chunk's fp32 logits within the budget of ``device``'s kind."""
    if CHUNK_ROWS is not None:
        return CHUNK_ROWS
    budget = CUDA_CHUNK_BYTES if device is not None and device.type == "cuda" else CHUNK_BYTES
    return max(1, budget // (4 * vocab_size))


def matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on (as for the plain ``nn.Linear``), else the
    weight's."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


def _chunk_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, softmax_dtype: torch.dtype
) -> torch.Tensor:
    # the inputs are already in the matmul dtype (autocast, if on, keeps them there); the softmax runs in fp32
    return F.linear(hidden, weight, bias).to(softmax_dtype)


def _positions(
    hidden: torch.Tensor, targets: torch.Tensor, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(hidden, targets, keep)`` of the positions the head runs on: only those with a target (``keep`` marks them
    among all), or all of them when one chunk holds them all (``keep`` None): then the matmuls and sums run over the
    full logits' layout, and round exactly as the plain path's do."""
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if targets.numel() <= chunk_rows(vocab_size, hidden.device):
        return hidden, targets, None
    keep = targets != IGNORE_INDEX
    return hidden[keep], targets[keep], keep


def _sum_as_cross_entropy(picked: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Σ −``picked`` (each position's log-prob of its target) over the positions with a target, summed as
    ``F.cross_entropy(reduction="sum")`` sums the full logits' rows (ATen's cascade over every position, ignored ones
    included), so that the two agree bit for bit."""
    if keep is None:
        column, valid = picked[:, None], targets != IGNORE_INDEX
    else:
        column, valid = picked.new_zeros(keep.numel(), 1), keep
        column[keep, 0] = picked
    labels = torch.where(valid, 0, IGNORE_INDEX)
    return F.nll_loss(column, labels, ignore_index=IGNORE_INDEX, reduction="sum")


class _LinearCrossEntropySum(torch.autograd.Function):
    """Σ −log softmax(h Wᵀ + b)[target] over rows, its gradients computed in the forward, one chunk at a time, and
    already multiplied by ``grad_scale`` (the factor ``backward`` is expected to be called with, so that the rounding
    is the plain path's)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, keep, dtype, grad_scale, needs):  # type: ignore[override]
        """The summed loss; the scaled gradients of ``needs`` (hidden, weight, bias) kept for backward."""
        softmax_dtype = torch.promote_types(dtype, torch.float32)
        weight_c = weight.to(dtype)
        bias_c = bias.to(dtype) if bias is not None else None
        scale = torch.as_tensor(grad_scale, dtype=softmax_dtype, device=hidden.device)
        rows = chunk_rows(weight.shape[0], hidden.device)
        picked = torch.empty(hidden.shape[0], dtype=softmax_dtype, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if needs[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=softmax_dtype, device=weight.device) if needs[1] else None
        grad_bias = torch.zeros(weight.shape[0], dtype=softmax_dtype, device=weight.device) if needs[2] else None
        for start in range(0, hidden.shape[0], rows):
            chunk = hidden[start : start + rows].to(dtype)
            chunk_targets = targets[start : start + rows]
            index = chunk_targets.clamp(min=0)[:, None]
            log_probs = torch.log_softmax(_chunk_logits(chunk, weight_c, bias_c, softmax_dtype), dim=-1)
            picked[start : start + rows] = log_probs.gather(1, index)[:, 0]
            if not any(needs):
                continue
            # d(-s log softmax[target]) = s*p - s*onehot, in place (the chunk's rows all have a target)
            grad_logits = log_probs.exp_().mul_(scale)
            grad_logits.scatter_add_(1, index, (-scale).expand(index.shape))
            del log_probs
            if grad_bias is not None:
                grad_bias += grad_logits.sum(0)
            grad_logits = grad_logits.to(dtype)
            if grad_hidden is not None:
                grad_hidden[start : start + rows] = grad_logits @ weight_c
            if grad_weight is not None and dtype == softmax_dtype:
                grad_weight.addmm_(grad_logits.T, chunk)
            elif grad_weight is not None:  # bf16 products summed in fp32
                grad_weight += (grad_logits.T @ chunk).to(softmax_dtype)
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias, scale)
        return _sum_as_cross_entropy(picked, targets, keep)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        """The kept gradients times grad_output / grad_scale (exactly 1, so exact, for loss.backward(grad_scale))."""
        grad_hidden, grad_weight, grad_bias, scale = ctx.saved_tensors
        factor = grad_output / scale  # no .item(): comparing it with 1 would sync the host with the device
        grad_hidden = grad_hidden * factor.to(grad_hidden.dtype) if grad_hidden is not None else None
        grad_weight = (grad_weight * factor).to(ctx.weight_dtype) if grad_weight is not None else None
        grad_bias = (grad_bias * factor).to(ctx.bias_dtype) if grad_bias is not None else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def liger_available(device: torch.device) -> bool:
    """True when liger-kernel is installed and ``device`` is a GPU its Triton kernels run on."""
    return device.type == "cuda" and importlib.util.find_spec("liger_kernel") is not None


def _liger_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

    loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction="sum")
    # Triton wants one dtype: the matmul dtype autocast would pick (the casts' backward returns the fp32 gradients)
    loss = loss_fn(weight.to(dtype), hidden.to(dtype), targets, bias.to(dtype) if bias is not None else None)
    loss = loss[0] if isinstance(loss, tuple) else loss
    return getattr(loss, "loss", loss).float()  # newer versions may return a CrossEntropyOutput


def linear_cross_entropy_sum(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    grad_scale: float | torch.Tensor = 1.0,
    use_liger: bool = True,
) -> torch.Tensor:
    """Σ cross-entropy of ``hidden @ weight.T + bias`` against ``targets`` over the positions whose target is not
    ``IGNORE_INDEX`` (``hidden``: (..., H), ``targets``: the same leading shape), without the full logits.

    ``grad_scale`` is the factor the loss's ``backward`` will be called with (any other still gives the right
    gradients, with one more rounding); liger-kernel's fused kernel is used on CUDA when installed."""
    if use_liger and liger_available(hidden.device) and torch.is_grad_enabled():
        keep = targets != IGNORE_INDEX  # only the positions that carry a loss
        return _liger_cross_entropy_sum(hidden[keep], weight, bias, targets[keep], matmul_dtype(hidden, weight))
    hidden, targets, keep = _positions(hidden, targets, weight.shape[0])
    if keep is None:
        # One chunk holds every position, so its logits fit the chunk budget: the plain head and ATen's fused
        # cross-entropy are the same sums in fewer ops (at millisecond steps the gradient-in-forward bookkeeping
        # cost 0.2-0.7 ms of an 11 ms step).
        logits = F.linear(hidden, weight, bias)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
    grads = torch.is_grad_enabled()
    needs = (
        grads and hidden.requires_grad,
        grads and weight.requires_grad,
        grads and bias is not None and bias.requires_grad,
    )
    dtype = matmul_dtype(hidden, weight)
    return _LinearCrossEntropySum.apply(hidden, weight, bias, targets, keep, dtype, grad_scale, needs)


@torch.no_grad()
def linear_cross_entropy_eval(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(summed cross-entropy, correct argmax predictions)`` over the positions with a target, chunk by chunk
    (``honing.losses.cross_entropy_sum`` and ``count_correct`` without the full logits)."""
    hidden, targets, keep = _positions(hidden, targets, weight.shape[0])
    dtype = matmul_dtype(hidden, weight)
    softmax_dtype = torch.promote_types(dtype, torch.float32)
    weight_c, bias_c = weight.to(dtype), bias.to(dtype) if bias is not None else None
    picked = torch.empty(hidden.shape[0], dtype=softmax_dtype, device=hidden.device)
    correct = torch.zeros((), dtype=torch.long, device=hidden.device)
    rows = chunk_rows(weight.shape[0], hidden.device)
    for start in range(0, hidden.shape[0], rows):
        chunk_targets = targets[start : start + rows]
        logits = _chunk_logits(hidden[start : start + rows].to(dtype), weight_c, bias_c, softmax_dtype)
        correct += (logits.argmax(-1) == chunk_targets).sum()  # an ignored position's -100 is never an argmax
        log_probs = torch.log_softmax(logits, dim=-1)
        picked[start : start + rows] = log_probs.gather(1, chunk_targets.clamp(min=0)[:, None])[:, 0]
    return _sum_as_cross_entropy(picked, targets, keep), correct


def _chunk_target_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    dtype: torch.dtype,
    temperature: float,
) -> torch.Tensor:
    softmax_dtype = torch.promote_types(dtype, torch.float32)
    logits = _chunk_logits(hidden.to(dtype), weight, bias, softmax_dtype)
    if temperature != 1.0:
        logits = logits / temperature
    valid = targets != IGNORE_INDEX
    picked = logits.gather(-1, targets.clamp(min=0))
    return (picked - logits.logsumexp(-1, keepdim=True)).masked_fill(~valid, 0.0)


def linear_target_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> torch.Tensor:
    """log softmax((``hidden`` @ ``weight``ᵀ + ``bias``) / ``temperature``) at ``targets`` (N, K): K target tokens
    per row of ``hidden`` (N, H), 0 where a target is ``IGNORE_INDEX``. One chunk of rows at a time; in backward
    each chunk's logits are recomputed, so at most one chunk's exist."""
    dtype = matmul_dtype(hidden, weight)
    rows = chunk_rows(weight.shape[0], hidden.device)
    grads = torch.is_grad_enabled() and (
        hidden.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    # cast once (as autocast's weight cache does), not once per chunk and again in each chunk's recompute
    weight, bias = weight.to(dtype), bias.to(dtype) if bias is not None else None
    parts = []
    for start in range(0, hidden.shape[0], rows):
        args = (hidden[start : start + rows], weight, bias, targets[start : start + rows], dtype, temperature)
        if grads:
            parts.append(torch.utils.checkpoint.checkpoint(_chunk_target_logps, *args, use_reentrant=False))
        else:
            parts.append(_chunk_target_logps(*args))
    if not parts:
        return hidden.new_zeros(targets.shape, dtype=torch.promote_types(dtype, torch.float32))
    return torch.cat(parts)


def completion_logps(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``honing.losses.completion_logps`` from the final hidden states (rows, length, H) and the head, without the
    full logits: ``(sum of log-probs, count)`` of each row's K completions, ``targets`` (rows, length, K)."""
    valid = targets != IGNORE_INDEX
    keep = valid.any(-1)  # positions that predict a token of some completion
    logps = linear_target_logps(hidden[keep], weight, bias, targets[keep])
    rows = keep.nonzero()[:, 0]
    sums = logps.new_zeros(targets.shape[0], targets.shape[2]).index_add(0, rows, logps)
    return sums, valid.sum(1)


def token_logps(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """``honing.losses.token_logps`` from the hidden states (rows, length, H) aligned with ``tokens`` (rows, length),
    computed only where ``mask`` is set (0 elsewhere), without the full logits."""
    keep = mask.bool()
    logps = linear_target_logps(hidden[keep], weight, bias, tokens[keep][:, None], temperature=temperature)
    return logps.new_zeros(tokens.shape).index_put((keep,), logps[:, 0])
