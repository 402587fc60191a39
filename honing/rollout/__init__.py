"""GRPO's rollouts from a server in its own environment (vLLM pins another torch): the server (``serve.py``, which
imports nothing of honing so that it runs where honing is not installed), its engines, and honing's client."""
