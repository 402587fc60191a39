"""The rollout keys shared by the ``grpo`` and ``rloo`` sections: how each prompt's completions are sampled, and by
what (honing's own decoder or a vLLM rollout server); their rollouts are the same."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from honing.config.tool_use_schema import ToolUseSection


class RolloutSection(ToolUseSection):
    """A GRPO-family rollout (``grpo``, ``rloo``): G completions sampled per prompt, with or without tool calls, by
    honing's own decoder or a vLLM rollout server. Defaults are TRL's GRPOConfig's."""

    num_generations: int = Field(default=8, ge=2)
    """G: completions sampled per prompt (a group)."""
    max_completion_length: int = Field(default=512, ge=1)
    """The longest completion, in tokens (a prompt is kept when it leaves this many tokens of ``data.seq_len``)."""
    temperature: float = Field(default=1.0, gt=0)
    """The sampling temperature of completions."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling of completions (1: off)."""
    top_k: int = Field(default=0, ge=0)
    """Top-k sampling of completions (0: no top-k filtering)."""
    min_p: float | None = Field(default=None, ge=0, le=1)
    """Min-p sampling of completions: tokens less likely than ``min_p`` times the most likely one are removed, after
    temperature, top-k and top-p (transformers' ``MinPLogitsWarper``); None: off."""
    repetition_penalty: float = Field(default=1.0, gt=0)
    """CTRL's repetition penalty on the tokens of the prompt and of the completion so far: their logits divided by it
    where positive, multiplied where negative, before temperature (transformers' ``RepetitionPenaltyLogitsProcessor``;
    the prompt's padding is not counted); 1: off, above 1: repeats less likely."""
    shared_prompt_forward: bool = True
    """Score a group's completions with its prompt computed once: the log-prob forward (policy, old policy and
    reference) runs each distinct prompt through the layers once and every completion of the group attends to its
    keys and values (Llama, Mistral, Qwen2 and Qwen3 models on text prompts, not sharded or DDP-wrapped; the plain
    forward otherwise). The log-probs and gradients are the plain forward's up to float32 rounding, for less work per
    step (the prompt's tokens are computed once, not G times); false: the plain transformers forward over prompt +
    completion for every completion, as TRL's."""
    use_vllm: bool = False
    """Sample rollouts from a vLLM rollout server (TRL's / Oumi's ``use_vllm``; docs/rollout-server.md), which gets
    the policy's weights before each step's rollouts; with no server configured or found, honing's own decoder
    samples them, said once in an info line."""
    vllm_mode: Literal["server", "colocate"] = "server"
    """Where vLLM runs (TRL's key): ``server``, a rollout server in its own environment (``make vllm-serve``;
    docs/rollout-server.md); ``colocate`` (inside the training process) is not built and is refused (a translated
    TRL / axolotl / Oumi config's colocate becomes honing's own decoder instead: ``use_vllm: false``, one note)."""
    vllm_server_base_url: str | None = None
    """The rollout server's URL, e.g. ``http://10.0.0.5:8000`` (TRL's key); None: ``vllm_server_host`` and
    ``vllm_server_port``. Neither set: a server at http://localhost:8000 is used when one answers there."""
    vllm_server_host: str = "0.0.0.0"
    """The rollout server's host, when ``vllm_server_base_url`` is not given (TRL's key and default)."""
    vllm_server_port: int = Field(default=8000, ge=1, le=65535)
    """The rollout server's port, when ``vllm_server_base_url`` is not given (TRL's key and default)."""
    vllm_server_timeout: float = Field(default=240.0, gt=0)
    """Seconds to wait for a configured rollout server to answer at the start of the run (TRL's key and default)."""

    @model_validator(mode="after")
    def _server_samples_without_filters(self) -> RolloutSection:
        validation = getattr(self, "validation", None)  # the held-out prompts' sampling (grpo / rloo)
        filters = [
            f"{where}{key}"
            for where, section in (("", self), ("validation.", validation))
            for key, off in (("min_p", None), ("repetition_penalty", 1.0))
            if section is not None and getattr(section, key) != off
        ]
        if self.use_vllm and filters:
            raise ValueError(
                f"{' and '.join(filters)}: honing's rollout server samples with temperature, top_p and top_k only; "
                "set use_vllm false (honing's own decoder applies them) or remove them"
            )
        return self
