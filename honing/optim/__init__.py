"""Optimizers, parameter groups and learning-rate schedules."""
