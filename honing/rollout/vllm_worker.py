"""The vLLM worker extension that loads the trainer's weights: vLLM mixes this class into each of its GPU workers
(``LLM(worker_extension_cls=...)``, a class in a module of its own that the workers import), and the engine calls
its methods on every worker through ``LLM.collective_rpc``. Imports nothing of honing."""

from __future__ import annotations

from typing import Any


class WeightLoader:
    """Methods every vLLM worker gets: weights sent as safetensors bytes loaded through the model's own
    ``load_weights``, which takes Hugging Face checkpoint names and copies each rank's shard in place (so CUDA
    graphs keep their addresses)."""

    model_runner: Any  # the worker's (vLLM sets it)

    def honing_begin_weight_update(self) -> None:
        """An update starts: its chunks follow."""

    def honing_load_weights(self, blob: bytes) -> int:
        """Load one chunk's tensors; how many there were."""
        from safetensors.torch import load

        tensors = load(blob)  # on the CPU: load_weights copies each into its (sharded) parameter on the GPU
        self.model_runner.model.load_weights(weights=list(tensors.items()))
        return len(tensors)

    def honing_finish_weight_update(self) -> None:
        """The update is complete (the engine then drops its prefix cache)."""
