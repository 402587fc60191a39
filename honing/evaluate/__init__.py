"""Evaluating a model: lm-evaluation-harness benchmarks (the generation eval lives with the callbacks)."""
