"""Shared test settings: tests marked ``gpu`` need a CUDA device and are skipped without one
(``python -m pytest -m gpu tests`` runs only them: the GPU check, ``tools/gpu_check.py``,
runs them there and counts a skip as a failure)."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
