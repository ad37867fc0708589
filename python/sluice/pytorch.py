"""PyTorch adapters: ``Dataset.to_torch()`` and ``Dataset.iter_torch_batches()``.

This module imports torch; ``import sluice`` does not import it (``to_torch`` and
``iter_torch_batches`` import this module when called).

``to_torch()`` is a ``torch.utils.data.IterableDataset`` that ``DataLoader`` can run with any
``num_workers``: each DDP rank takes its shard (``shard(rank, world_size)`` where the pipeline
still has random access), and each DataLoader worker takes every ``num_workers``-th run of a
batch's worth of that shard. DataLoader reads its workers in turn, so the batches it delivers
are the ones one process makes — the same for any ``num_workers``, nothing duplicated or
lost. Each ``iter(loader)`` is the next epoch (shared by the workers through shared memory);
``set_epoch(k)`` names it, as with ``DistributedSampler``.

>>> import sluice, torch
>>> tds = sluice.range(10).batch(4).to_torch()
>>> loader = torch.utils.data.DataLoader(tds, batch_size=None, num_workers=2)
>>> [b["id"].tolist() for b in loader], len(loader)
([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], 3)
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import warnings
from typing import Any, Iterator, Mapping

import numpy as np
import torch
import torch.utils.data as tud

from . import _device_decode, _native
from ._ahead import ahead
from ._device_decode import decode_batch, split_encoded
from .frameworks import INV_255, check_images

# Slots of the shared epoch record (a multiprocessing array every worker process sees).
_STARTS, _BASE, _EXPLICIT = 0, 1, 2


def _dist_rank_world() -> "tuple[int, int] | None":
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class TorchDataset(tud.IterableDataset):
    """A sluice ``Dataset`` as a ``torch.utils.data.IterableDataset`` (made by
    ``Dataset.to_torch``; see the module). Give it to ``DataLoader(tds, batch_size=None)``
    when the pipeline batches (sluice's batches pass through), or with a ``batch_size`` to
    let DataLoader collate samples.

    Checkpoints follow the protocol of torchdata's ``StatefulDataLoader``: the iterator of
    each epoch has ``state_dict()``/``load_state_dict()`` (in each worker), so
    ``StatefulDataLoader(tds, ...).state_dict()`` resumes exactly after the last batch it
    delivered, in its epoch, and the epochs after it follow. (A checkpoint taken after an
    epoch ended carries no position: call ``set_epoch`` with the next epoch on resume.)
    """

    def __init__(
        self,
        ds: Any,
        seed: int = 0,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        equal: bool = True,
        iter_kwargs: Mapping[str, Any] | None = None,
    ):
        if (rank is None) != (world_size is None):
            raise ValueError("to_torch: give both rank and world_size, or neither")
        if rank is not None:
            from ._args import _int

            _int("world_size", world_size, 1)
            _int("rank", rank, 0)
            if rank >= world_size:  # type: ignore[operator]
                raise ValueError(f"to_torch: rank must be < world_size, got rank={rank}, world_size={world_size}")
        self._ds = ds
        self._seed = seed
        self._explicit_rank = None if rank is None else (rank, world_size)
        self._rank_world = self._explicit_rank or _dist_rank_world()
        self._equal = bool(equal)
        self._iter_kwargs = dict(iter_kwargs or {})
        # Epoch bookkeeping shared with DataLoader's worker processes (inherited when they
        # start): how many epoch iterators were started, the epoch the first one ran
        # (moved by a checkpoint), and set_epoch's value (-1: none).
        self._epochs = multiprocessing.get_context().Array("q", [0, 0, -1])
        self._parts: dict = {}

    # Epochs --------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Runs epoch ``epoch`` from now on (every worker, every ``iter(loader)``) until called
        again — for trainers that own the epoch counter, like ``DistributedSampler.set_epoch``.
        Without it, each ``iter(loader)`` is the next epoch."""
        from ._args import _int

        with self._epochs.get_lock():
            self._epochs[_EXPLICIT] = _int("epoch", epoch, 0)

    def _next_epoch(self, workers: int) -> "tuple[int, int]":
        """(the epoch the next iterator runs, its round: how many epochs each process
        started before it)."""
        with self._epochs.get_lock():
            starts = self._epochs[_STARTS]
            self._epochs[_STARTS] = starts + 1
            # Every worker starts one iterator per epoch, so the k-th start of each is round k.
            round_ = starts // workers
            if self._epochs[_EXPLICIT] >= 0:
                return self._epochs[_EXPLICIT], round_
            return self._epochs[_BASE] + round_, round_

    def _resumed(self, epoch: int, round_: int) -> None:
        # The iterators of round ``round_`` continue checkpointed epoch ``epoch``; the rounds
        # after it run the epochs after it. Every worker sets the same value.
        with self._epochs.get_lock():
            if self._epochs[_EXPLICIT] < 0:
                self._epochs[_BASE] = epoch - round_

    # Parts ---------------------------------------------------------------------------
    def _ranks(self) -> "tuple[int, int]":
        if self._explicit_rank is None and tud.get_worker_info() is None:
            # Decided in the main process (a worker may not see the process group).
            self._rank_world = _dist_rank_world() or self._rank_world
        return self._rank_world or (0, 1)

    def _layout(self) -> "tuple[bool, int]":
        """(whether the user sharded already where the shards go, block size)."""
        sharded, block = self._ds._native.split_point()
        # Whole batches to each worker when the batch directly follows the random-access part.
        return sharded, block or 1

    def _part(self, worker: int, workers: int) -> Any:
        rank, world = self._ranks()
        key = (rank, world, worker, workers)
        if key not in self._parts:
            shards = []
            if world == 1 and workers == 1:
                self._parts[key] = self._ds
                return self._ds
            sharded, block = self._layout()
            if world > 1:
                if sharded:
                    raise ValueError(
                        f"to_torch: the pipeline already has a shard() step and the rank is "
                        f"{rank} of {world}; remove the shard() (to_torch shards by rank) or "
                        "pass rank=0, world_size=1"
                    )
                shards.append({"rank": rank, "world_size": world, "equal": self._equal})
            if workers > 1:
                shards.append({"rank": worker, "world_size": workers, "equal": False, "block": block})
            self._parts[key] = self._ds._with_shards(shards)
        return self._parts[key]

    def __len__(self) -> int:
        """Batches (or samples) this rank gets per epoch — the same for any ``num_workers``
        when the pipeline batches right after its random-access steps. ``TypeError`` when
        only running tells (after a ``filter``, …)."""
        rank, world = self._ranks()
        if world == 1:
            return len(self._ds)
        return len(self._ds._with_shards([{"rank": rank, "world_size": world, "equal": self._equal}]))

    def __iter__(self) -> "TorchEpoch":
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return TorchEpoch(self, worker, workers, *self._next_epoch(workers))

    def __getstate__(self) -> dict:
        # Pickled for spawned workers in the main process: settle the rank there.
        self._ranks()
        state = dict(self.__dict__)
        state["_parts"] = {}
        return state


class TorchEpoch:
    """One epoch of a ``TorchDataset`` in one process (DataLoader worker or main): starts its
    pipeline at the first ``next``, so a checkpoint loaded before that starts it in place."""

    def __init__(self, owner: TorchDataset, worker: int, workers: int, epoch: int, round_: int):
        self._owner, self._worker, self._workers = owner, worker, workers
        self.epoch, self._round = epoch, round_
        # Where the pipeline (re)starts from when it is not running: a loaded checkpoint, or
        # where it stood when it was closed.
        self._resume: dict | None = None
        self._it: Any = None
        self._done = False

    def __iter__(self) -> "TorchEpoch":
        return self

    def __next__(self) -> Any:
        if self._it is None:
            if self._done:
                raise StopIteration
            kwargs = dict(self._owner._iter_kwargs)
            if self._workers > 1 and kwargs.get("num_threads") is None:
                # The workers share the cores.
                kwargs["num_threads"] = max(1, _native.cores() // self._workers)
            part = self._owner._part(self._worker, self._workers)
            self._it = part.iter(self._owner._seed, epoch=self.epoch, **kwargs)
            if self._resume is not None:
                self._it.load_state_dict(self._resume)
        try:
            return next(self._it)
        except StopIteration:
            self._done = True
            self.close()
            raise

    def close(self) -> None:
        it, self._it = self._it, None
        if it is not None:
            if it._count:
                self._resume = it.state_dict()
            it.close()

    def state_dict(self) -> dict:
        """Where this process stands in the epoch: resumes after the last batch it delivered."""
        running = self._it is not None and self._it._count
        inner = self._it.state_dict() if running else self._resume
        return {
            "epoch": self.epoch,
            "worker": self._worker,
            "num_workers": self._workers,
            "done": self._done,
            "sluice": inner,
        }

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or "epoch" not in state or "sluice" not in state:
            raise ValueError(f"to_torch: not a checkpoint of a to_torch() epoch: {state!r}")
        if (state["worker"], state["num_workers"]) != (self._worker, self._workers):
            raise ValueError(
                f"to_torch: the checkpoint is of DataLoader worker {state['worker']} of "
                f"{state['num_workers']}, this is worker {self._worker} of {self._workers}: "
                "resume with the same num_workers"
            )
        if self._it is not None:
            self.close()
        self.epoch = int(state["epoch"])
        self._owner._resumed(self.epoch, self._round)
        self._done = bool(state["done"])
        self._resume = state["sluice"]


def to_tensors(batch: Mapping[str, Any], dtypes: Mapping[str, Any]) -> dict:
    """A batch's numpy fields as CPU tensors sharing their memory (cast where ``dtypes`` says);
    other fields (strings, ragged lists) as they are."""
    missing = [k for k in dtypes if k not in batch]
    if missing:
        raise KeyError(f"iter_torch_batches: dtypes names field(s) {missing} not in the batch (fields: {sorted(batch)})")
    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray) and v.dtype != object:
            t = torch.from_numpy(v)
            if k in dtypes:
                t = t.to(dtypes[k])
            out[k] = t
        elif k in dtypes:
            raise TypeError(f"iter_torch_batches: field {k!r} is not an array ({type(v).__name__}); it cannot take a dtype")
        else:
            out[k] = v
    return out


def normalize_images(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 [B, H, W, C] → float32 [B, C, H, W] (channels_last strides), ``(x / 255 - mean) /
    std`` with the engine's float ops in its order (scale, subtract, divide), on x's device;
    ``mean`` and ``std`` are [1, C, 1, 1] float32 tensors on that device."""
    return x.permute(0, 3, 1, 2).to(torch.float32).mul_(float(INV_255)).sub_(mean).div_(std)


def _host_part(batch: dict, specs: Mapping[str, tuple], host_dtypes: Mapping[str, Any],
               decode: bool) -> tuple[dict, dict]:
    """The batch's fields as host tensors, and apart the ones left encoded for the device
    (``_device_decode.split_encoded``) when the run decodes there."""
    encoded = split_encoded(batch) if decode else {}
    check_images(batch, {k: v for k, v in specs.items() if k not in encoded}, "iter_torch_batches")
    return to_tensors(batch, {k: v for k, v in host_dtypes.items() if k not in encoded}), encoded


def _decoded(out: dict, encoded: Mapping[str, tuple], device: Any, dtypes: Mapping[str, Any],
             specs: Mapping[str, tuple]) -> None:
    for k, (images, draws) in encoded.items():
        t = decode_batch(images, draws, device)
        # A normalised field is cast after it is normalised (`_normalized`).
        out[k] = t.to(dtypes[k]) if k in dtypes and k not in specs else t


def _normalized(out: dict, on_device: Mapping[str, tuple], dtypes: Mapping[str, Any]) -> None:
    for k, (mean, std) in on_device.items():
        t = normalize_images(out[k], mean, std)
        out[k] = t.to(dtypes[k]) if k in dtypes else t


def iter_torch_batches(
    batches: Iterator[dict],
    device: Any,
    dtypes: Mapping[str, Any],
    pin_memory: bool,
    prefetch: int,
    specs: Mapping[str, tuple] | None = None,
    decode: bool = False,
) -> Iterator[dict]:
    """Batches as dicts of tensors on ``device`` (see ``Dataset.iter_torch_batches``);
    ``specs`` are the fields to normalise there (``frameworks.normalize_spec``); ``decode``:
    the run leaves images encoded for the device (``decodes_on_device``)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError(f"iter_torch_batches: device {device} asked for, but torch sees no CUDA device")
    if pin_memory and not cuda:
        warnings.warn("iter_torch_batches: pin_memory=True only matters for a CUDA device; ignored", stacklevel=3)
        pin_memory = False
    specs = specs or {}
    # Mean and std go to the device once, not with every batch.
    on_device = {
        k: tuple(torch.as_tensor(v, device=device).view(1, -1, 1, 1) for v in (mean, std))
        for k, (mean, std) in specs.items()
    }
    # A normalised field is cast after it is normalised.
    host_dtypes = {k: v for k, v in dtypes.items() if k not in specs}
    if not cuda:
        for batch in batches:
            out, encoded = _host_part(batch, specs, host_dtypes, decode)
            _decoded(out, encoded, device, dtypes, specs)
            _normalized(out, on_device, dtypes)
            yield out
        return
    # On a GPU: each batch is sent (copied from pinned host memory, decoded and normalised
    # there, all on a side stream) by a thread of its own, `prefetch` batches ahead, so that
    # work, host half and device half, runs beside the training step instead of inside it.
    stream = torch.cuda.Stream(device=device)
    # Host batches whose copies may still be running: a copy from page-locked memory reads
    # it after `send` returns, and the engine writes a later batch into the same buffer as
    # soon as it is freed, so it is held until its copy is done.
    held: collections.deque = collections.deque()

    def send(batch: dict) -> tuple:
        host, encoded = _host_part(batch, specs, host_dtypes, decode)
        with torch.cuda.device(device), torch.cuda.stream(stream):
            out = {}
            for k, v in host.items():
                if isinstance(v, torch.Tensor):
                    if pin_memory and not v.is_pinned():
                        # Not in the engine's page-locked ring (a field under 1 MiB, a cast
                        # on the host): copied into pinned memory here.
                        v = v.pin_memory()
                    out[k] = v.to(device, non_blocking=True)
                else:
                    out[k] = v
            # Encoded images crossed the bus and are decoded there (nvJPEG); uint8 crossed
            # it and the floats are made on the device; all on the side stream.
            _decoded(out, encoded, device, dtypes, specs)
            _normalized(out, on_device, dtypes)
            done = torch.cuda.Event()
            done.record(stream)
        return out, done, host

    def receive(out: dict, done: Any, host: dict) -> dict:
        held.append((done, host))
        while held and (len(held) > prefetch + 1 or held[0][0].query()):
            held.popleft()[0].synchronize()
        return _receive(out, done)

    try:
        # A batch sent but never taken (a `break`) is waited for before its buffers go back.
        for sent in ahead(batches, send, max(1, prefetch), drop=lambda s: s[1].synchronize(),
                          interrupt=getattr(batches, "close", None)):
            yield receive(*sent)
    finally:
        # Stopped early: no host buffer goes back while a copy still reads it.
        for done, _ in held:
            done.synchronize()


def cuda_pinner() -> "tuple[int, int] | None":
    """The addresses of ``cudaHostRegister`` and ``cudaHostUnregister`` in the CUDA runtime
    torch loaded, for the engine to page-lock its batch buffers with
    (``sluice._native.pin_buffers``); ``None`` when this process has no such shared library
    (a torch that links the runtime statically, a system without ``/proc``)."""
    import ctypes

    torch.cuda.init()
    try:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps if "/libcudart" in line), None)
    except OSError:
        return None
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (lib.cudaHostRegister, lib.cudaHostUnregister))


#: Host threads per GPU from which ``decode_on_device="auto"`` leaves decoding on the host.
#: Measured on an H200 (docs/BENCHMARKS.md, "Feed the GPU"): ResNet-50 was fed at 0.30× and
#: 0.53× of the model alone by 1 and 2 host threads decoding on the host, at 1.00× by 4,
#: and at 0.73–0.89× by the GPU's own decode, which shares the GPU with the training step
#: whatever the host threads. So the device's decode pays only below 4 host threads.
HOST_THREADS_ENOUGH = 4


def host_threads(num_threads: "int | None") -> int:
    """The host threads one process's pipeline has: ``num_threads`` (0 is the iterating
    thread alone), else its share of the cores the engine counts (``_native.cores``) —
    divided among the processes of the node when ``torchrun`` says how many there are
    (``LOCAL_WORLD_SIZE``)."""
    if num_threads is not None:
        return max(1, num_threads)
    cores = _native.cores()
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, cores // local)


def decodes_on_device(device: Any, asked: "bool | str", threads: int = 1) -> bool:
    """Whether the batches are decoded on ``device`` (``iter_torch_batches(decode_on_device=)``):
    forced with ``True``; with ``"auto"``, where ``device`` is a CUDA GPU that decodes JPEGs
    (torchvision's nvJPEG, checked once) and the pipeline has fewer than
    ``HOST_THREADS_ENOUGH`` host ``threads`` (``host_threads``) to decode with.

    >>> decodes_on_device("cpu", "auto"), decodes_on_device("cpu", True)
    (False, True)
    """
    if asked is True:
        return True
    if asked is False or device is None or threads >= HOST_THREADS_ENOUGH:
        return False
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.is_available() and _device_decode.available(device)


def pin_batches(device: Any, pin_memory: bool) -> Any:
    """For a CUDA ``device`` with ``pin_memory``: a guard under which the engine writes batches
    straight into page-locked buffers it recycles (``sluice.recycle``'s ring), so the copy to
    the device needs no ``pin_memory()`` copy first; ``None`` otherwise, or where the CUDA
    runtime cannot be found (then the batches are copied into pinned memory as before)."""
    if not pin_memory or device is None or torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return None
    from . import _native

    pinner = cuda_pinner()
    if pinner is None:
        warnings.warn("iter_torch_batches: no shared CUDA runtime (libcudart) in this process; batches are "
                      "copied into pinned memory instead of written there", stacklevel=4)
        return None
    return _native.pin_buffers(pinner)


def _receive(out: dict, done: Any) -> dict:
    current = torch.cuda.current_stream()
    current.wait_event(done)
    for v in out.values():
        if isinstance(v, torch.Tensor):
            # The tensor was made on the side stream; tell the allocator it is used here.
            v.record_stream(current)
    return out
