"""Peer pipelines for the reference workloads, one module per system.

Each module defines ``NAME`` (display name), ``WORKLOADS`` (the workloads it implements) and
``make_iter(workload, data_dir, *, samples=None, seed=0, workers=2, **cfg)``, a generator of
batches (``dict[str, array]``) that releases everything it started when closed. See
``common.py`` for the workloads' exact semantics and the batch layout.
"""

# system id → module name, in the order the runner interleaves them
SYSTEMS = {
    "torch_dataloader": "torch_dataloader",
    "ray_data": "ray_data",
    "grain": "grain_peer",
    "tfdata": "tfdata",
    "sluice_udf": "sluice_udf",
    "sluice_native": "sluice_native",
    "sluice_native_avx2": "sluice_native_avx2",
    "limit": "limits",
}

BASELINE = "torch_dataloader"
LIMIT = "limit"


def load(system: str):
    import importlib

    if system not in SYSTEMS:
        raise KeyError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    return importlib.import_module(f"{__name__}.{SYSTEMS[system]}")
