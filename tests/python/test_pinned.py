"""Batches straight into page-locked memory (issue 40, item 1): while a pinner is live the
engine writes float32 and uint8 batches into buffers it locks once and recycles, and every
buffer is unlocked before its memory is freed — after a run ends, after a ``break``, after
the engine drops batches it had queued. Here the pinner is ``mlock`` (no GPU): the kernel's
own counts (``VmLck``, the ``lo`` flag of a mapping) say what is locked. The CUDA case
(``cudaHostRegister``, through ``iter_torch_batches(device="cuda", pin_memory=True)``) runs
where torch sees a GPU (benchmarks/gpu_check.sh)."""

import json
import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sluice
from gpu import needs_cuda
from sluice import _native


def mlock_allowed() -> bool:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= 256 << 20


needs_mlock = pytest.mark.skipif(not mlock_allowed(), reason="RLIMIT_MEMLOCK below 256 MiB and not root")

# In a fresh interpreter: the locked memory and the recycled buffers are the process's.
SCRIPT = textwrap.dedent(r"""
    import gc, json, sys
    import numpy as np
    import sluice
    from sluice import _native

    def vm_lck_kb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmLck:"))

    def locked_at(addr):
        # The mapping holding `addr` is locked: mlock splits it off with the `lo` flag.
        start = None
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()[0]
                if "-" in head and not head.endswith(":"):
                    lo, hi = (int(x, 16) for x in head.split("-"))
                    start = lo <= addr < hi
                elif start and line.startswith("VmFlags:"):
                    return "lo" in line.split()[1:]
        return False

    def pipeline(n):
        def make(s):
            i = s["id"]
            return {"x": np.full((512, 512), i, np.float32), "img": np.full((512, 512, 3), i % 251, np.uint8),
                    "id": i}
        return sluice.range(n).map(make).batch(2)

    out = {}
    want = [(b["x"].copy(), b["img"].copy()) for b in pipeline(40).iter(seed=0, epoch=0)]
    before = _native.pin_stats()
    with _native.pin_buffers("mlock"):
        addrs, locked, same, during = set(), True, True, 0
        for k, b in enumerate(pipeline(40).iter(seed=0, epoch=0)):
            during = max(during, vm_lck_kb())
            for f in ("x", "img"):
                addrs.add(b[f].ctypes.data)
                locked &= locked_at(b[f].ctypes.data)
            same &= np.array_equal(b["x"], want[k][0]) and np.array_equal(b["img"], want[k][1])
            del b
        ring = _native.pin_stats()["locks"] - before["locks"]
        # Stopped early: the batches the engine had queued are dropped, and unlocked first.
        it = pipeline(40).iter(seed=0, epoch=0)
        first = next(it)
        same &= np.array_equal(first["x"], want[0][0])
        it.close()
        del it, first
    gc.collect()
    after = _native.pin_stats()
    out.update(batches=len(want), addrs=len(addrs), ring=ring, locked=locked, same=same, during_kb=during,
               locks=after["locks"] - before["locks"], unlocks=after["unlocks"] - before["unlocks"],
               failed=after["failed"] - before["failed"], locked_now=after["locked"], end_kb=vm_lck_kb())
    # A guard closed: new batches are not locked.
    b = next(iter(pipeline(4).iter(seed=0, epoch=0)))
    out["unpinned_after"] = not locked_at(b["x"].ctypes.data)
    print(json.dumps(out))
""")


@needs_mlock
def test_batches_land_in_locked_buffers_that_go_round_a_ring_and_are_unlocked_when_freed():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    # Every batch the consumer saw was in locked memory, with the values an unpinned run has.
    assert got["locked"] and got["same"] and got["failed"] == 0, got
    assert got["during_kb"] >= 2048, got  # at least one 2 MiB float32 batch locked
    # 20 batches of two fields (40 buffers handed over) through a few recycled buffers, each
    # locked once: as many locks as addresses seen. (How many are in flight at once depends
    # on how far the engine runs ahead; the ring keeps up to 8 per field.)
    assert got["batches"] == 20
    assert got["ring"] == got["addrs"] <= 2 * sluice_kept_pinned(), got
    # Every buffer locked was unlocked before it was freed: the kernel agrees.
    assert got["locks"] == got["unlocks"] and got["locked_now"] == 0 and got["end_kb"] == 0, got
    assert got["unpinned_after"], got


def sluice_kept_pinned() -> int:
    return 8  # sluice_core::recycle::KEPT_PINNED


def test_a_pinner_is_mlock_or_two_function_addresses():
    with pytest.raises(ValueError, match='"mlock" or \\(cudaHostRegister'):
        _native.pin_buffers("cuda")
    with pytest.raises(ValueError, match='"mlock" or \\(cudaHostRegister'):
        _native.pin_buffers((1, 2, 3))
    with pytest.raises(ValueError, match="null function address"):
        _native.pin_buffers((0, 0))


@needs_mlock
def test_one_pinner_at_a_time():
    import ctypes

    libc = ctypes.CDLL(None)
    # Addresses that are never called: the second pinner is refused before it locks anything.
    other = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (libc.getpid, libc.getppid))
    with _native.pin_buffers("mlock"):
        with pytest.raises(ValueError, match="already pinned with mlock .* one pinner at a time"):
            _native.pin_buffers(other)
    # Closed: another pinner may start (and is closed at once, having locked nothing).
    _native.pin_buffers(other).close()


def test_iter_torch_batches_on_the_cpu_pins_nothing():
    torch = pytest.importorskip("torch")
    from sluice import pytorch

    assert pytorch.pin_batches("cpu", True) is None
    assert pytorch.pin_batches(None, True) is None
    assert pytorch.pin_batches("cuda", False) is None
    del torch


@needs_cuda
def test_cuda_batches_are_copied_from_the_engines_locked_ring_unchanged():  # pragma: no cover - GPU only
    torch = pytest.importorskip("torch")

    def pipeline():
        def make(s):
            i = s["id"]
            return {"x": np.full((256, 1024), i, np.float32), "img": np.full((512, 512, 3), i % 251, np.uint8)}
        return sluice.range(120).map(make).batch(4)

    from sluice import pytorch

    assert pytorch.cuda_pinner() is not None, "no libcudart in the process"
    before = _native.pin_stats()
    big = torch.randn(4096, 4096, device="cuda")
    for k, b in enumerate(pipeline().iter_torch_batches(seed=0, epoch=0, device="cuda", pin_memory=True)):
        # Keep the GPU busy so copies queue behind the work: a buffer given back too early
        # would be overwritten by the engine before its copy ran.
        for _ in range(4):
            big = big @ big / 64
        ids = torch.arange(4 * k, 4 * k + 4, device="cuda")
        assert torch.equal(b["x"][:, 0, 0], ids.float()) and torch.equal(b["x"].amin((1, 2)), b["x"].amax((1, 2)))
        assert torch.equal(b["img"][:, 0, 0, 0].long(), ids % 251)
    after = _native.pin_stats()
    assert after["locks"] > before["locks"] and after["failed"] == before["failed"], after
