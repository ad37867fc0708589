"""Comparing runs in tests: the batches of two runs, byte for byte."""

import numpy as np


def same(a, b):
    """Batches equal byte for byte (arrays: dtype, shape and content; other values by ==)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], np.ndarray):
                assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
                assert x[k].tobytes() == y[k].tobytes(), k
            else:
                assert x[k] == y[k], k
