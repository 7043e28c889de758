"""Test harness helpers for Ray + PyTorch projects (pytest plugin, tracker, metric checks)."""
