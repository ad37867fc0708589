"""The CUDA tests' marker: they run where torch sees a GPU (benchmarks/gpu_check.sh) and skip
elsewhere."""

import pytest


def cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not cuda(), reason="needs a CUDA device (benchmarks/gpu_check.sh runs it on one)")
