"""Handing batches to a training framework: ``Dataset.iter_jax``, ``Dataset.to_torch`` and
``Dataset.iter_torch_batches`` (the torch side lives in ``sluice.pytorch``).

The framework is imported when the method is called, never by ``import sluice``: it is optional.

>>> import sluice
>>> ds = sluice.range(6).batch(4)
>>> [b["id"].shape for b in ds.iter_jax(epoch=0)]
[(4,), (2,)]
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np


def _jax():
    try:
        import jax
    except ImportError as e:  # pragma: no cover - jax is in the test deps
        raise ImportError("iter_jax needs jax: pip install 'jax[cpu]' (or jax[cuda12] & co.)") from e
    return jax


def _jax_normalizer(jax: Any) -> Any:
    """uint8 [B, H, W, C] on a device → float32 [B, C, H, W], normalised there (jitted)."""
    import jax.numpy as jnp

    @jax.jit
    def normalize(x: Any, mean: Any, std: Any) -> Any:
        y = (x.astype(jnp.float32) * INV_255 - mean) / std
        return jnp.transpose(y, (0, 3, 1, 2))

    return normalize


def _pytorch() -> Any:
    try:
        from . import pytorch
    except ImportError as e:  # pragma: no cover - torch is in the test deps
        if getattr(e, "name", None) != "torch":
            raise
        raise ImportError("this needs torch: pip install torch (or sluice-ml[torch])") from e
    return pytorch


#: The scale from uint8 to [0, 1], as the engine's ``normalize`` rounds it (f32 of 1/255).
INV_255 = np.float32(1.0 / 255.0)


def normalize_spec(normalize: Any, where: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``normalize=(mean, std)`` (the ``image`` field) or ``{field: (mean, std)}``: per field,
    float32 mean and std with one value per channel (1 or 3), checked."""
    if normalize is None:
        return {}
    items = normalize.items() if isinstance(normalize, Mapping) else [("image", normalize)]
    out = {}
    for field, pair in items:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{where}: normalize must be (mean, std) or {{field: (mean, std)}}, got {pair!r}")
        try:
            mean, std = (np.asarray(x, np.float32).reshape(-1) for x in pair)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{where}: normalize's mean and std must be numbers, one per channel: {e}") from None
        if mean.size not in (1, 3) or mean.shape != std.shape:
            raise ValueError(f"{where}: normalize for field {field!r} needs 1 or 3 values in both mean and std, "
                             f"got {mean.size} and {std.size}")
        if not (np.isfinite(mean).all() and np.isfinite(std).all()) or (std == 0).any():
            raise ValueError(f"{where}: normalize for field {field!r}: mean and std must be finite and std non-zero, "
                             f"got {mean.tolist()} and {std.tolist()}")
        out[str(field)] = (mean, std)
    return out


def check_images(batch: Mapping[str, Any], specs: Mapping[str, tuple], where: str) -> None:
    """The fields ``normalize=`` names must be batches of uint8 HWC images with as many
    channels as mean and std have values."""
    for k, (mean, _) in specs.items():
        if k not in batch:
            raise KeyError(f"{where}: normalize names field {k!r}, not in the batch (fields: {sorted(batch)})")
        v = batch[k]
        ok = isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 4 and v.shape[-1] == mean.size
        if not ok:
            got = f"{v.dtype}{list(v.shape)}" if isinstance(v, np.ndarray) else type(v).__name__
            raise TypeError(
                f"{where}: normalize= takes field {k!r} as a batch of uint8 images [batch, height, width, "
                f"{mean.size}] (decoded, before any normalize or to_tensor in the pipeline), got {got}"
            )


class FrameworksMixin:
    """``Dataset`` methods that hand batches to a framework."""

    iter: Any  # Dataset.iter

    def to_torch(
        self,
        seed: int = 0,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        equal: bool = True,
        **iter_kwargs: Any,
    ) -> Any:
        """This dataset as a ``torch.utils.data.IterableDataset`` for ``DataLoader`` — with
        ``batch_size=None`` when the pipeline batches, so its batches pass through:
        ``DataLoader(ds.to_torch(), batch_size=None, num_workers=N)``.

        - Any ``num_workers``: each worker takes every N-th batch's worth of samples (the
          shard goes where the pipeline still has random access), and DataLoader reads the
          workers in turn, so the batches are those of ``num_workers=0`` — none duplicated
          or lost. Each worker runs ``cores // N`` threads per stage unless ``num_threads=``
          says otherwise. sluice is parallel already: ``num_workers=0`` is the fast default.
        - DDP: the rank and world size come from ``torch.distributed`` when it is
          initialised, or from ``rank=``/``world_size=``; each rank gets ``shard(rank,
          world_size, equal)`` (``equal=True``: the same number of batches on every rank).
        - Epochs: each ``iter(loader)`` is the next epoch, reshuffled from (seed, epoch), in
          every worker; ``tds.set_epoch(k)`` names the epoch instead.
        - ``len(tds)`` is the batches per epoch of this rank (a ``TypeError`` when only
          running tells); ``state_dict()``/``load_state_dict()`` follow torchdata's
          ``StatefulDataLoader`` protocol (exact resume, same ``num_workers``).

        ``iter_kwargs`` are ``iter``'s (``num_threads``, ``processes``, ``plan``, …).

        >>> import sluice, torch
        >>> tds = sluice.range(10).shuffle(seed=0).batch(4).to_torch()
        >>> loader = torch.utils.data.DataLoader(tds, batch_size=None)
        >>> sorted(i for b in loader for i in b["id"].tolist()), len(loader)
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 3)
        """
        from ._args import _int

        return _pytorch().TorchDataset(
            self, _int("seed", seed, 0), rank=rank, world_size=world_size, equal=equal, iter_kwargs=iter_kwargs
        )

    def iter_torch_batches(
        self,
        seed: int = 0,
        epoch: int | None = None,
        *,
        device: Any = None,
        dtypes: Mapping[str, Any] | None = None,
        pin_memory: bool = False,
        prefetch: int = 2,
        normalize: Any = None,
        decode_on_device: "bool | str" = "auto",
        **iter_kwargs: Any,
    ) -> Iterator[dict]:
        """Batches as dicts of ``torch.Tensor`` on ``device`` (default CPU). On the CPU
        numpy fields become tensors sharing their memory (``torch.from_numpy``: no copy);
        ``dtypes`` casts fields (``{"image": torch.float16}``); strings and ragged lists
        stay lists. On a CUDA device, batches are copied ``prefetch`` ahead on a side CUDA
        stream with ``non_blocking`` copies, so the copies overlap the training step; the
        current stream waits for each batch's copy before it is yielded. With
        ``pin_memory=True`` the engine writes each batch (its float32 and uint8 fields of
        1 MiB or more) straight into page-locked buffers it recycles, so no ``pin_memory()``
        copy comes first; a buffer goes back to the engine once its copy is done. ``seed``, ``epoch`` and the rest are ``iter``'s (a call
        without ``epoch`` is the next epoch).

        ``normalize=(mean, std)`` (or ``{field: (mean, std)}``; the field defaults to
        ``image``) takes that field as uint8 images ``[batch, H, W, C]`` — the pipeline stops
        before its ``normalize`` — and normalises them after the copy, on ``device``:
        ``(x / 255 - mean) / std`` as float32 ``[batch, C, H, W]`` (``channels_last`` strides),
        the values ``sluice.image.normalize`` gives on the host. A CUDA copy then moves a
        quarter of the bytes; a ``dtypes`` cast of the field applies after it.

        ``decode_on_device`` moves JPEG decoding to the device: the pipeline's ``decode`` +
        ``random_resized_crop`` (+ the ``horizontal_flip`` after them), when nothing on the
        host reads their pixels before the batch, leave the encoded images and the draws the
        host would have made (the same crops and flips), and the batch is decoded (nvJPEG),
        cropped, resized and flipped on ``device`` into uint8 ``[batch, H, W, C]``, then
        normalised there with ``normalize=``. ``"auto"`` (the default): where ``device`` is a
        GPU whose nvJPEG torchvision can drive and the pipeline has fewer than 4 host threads
        (``num_threads``, else the process's share of the cores: on an H200, 4 host threads
        fed ResNet-50 at the model's own rate, the GPU's decode at 0.73–0.89× of it, since
        it shares the GPU with the step); ``True`` forces it (on the CPU too, with
        torchvision's CPU decoder); ``False`` keeps decoding on the host. The device's decoder
        is not the host's, so its pixels differ within a stated tolerance (mean ≤ 1 level, ≥ 35
        dB): a run is reproducible on its machine, and ``False`` gives the host's bytes on
        every machine.

        >>> import sluice, torch
        >>> b = next(iter(sluice.range(6).batch(4).iter_torch_batches(dtypes={"id": torch.float32})))
        >>> b["id"]
        tensor([0., 1., 2., 3.])
        """
        from ._args import _int

        if dtypes is not None and not isinstance(dtypes, Mapping):
            raise TypeError(f"iter_torch_batches: dtypes must be a dict {{field: dtype}}, got {type(dtypes).__name__}")
        _int("prefetch", prefetch, 0)
        specs = normalize_spec(normalize, "iter_torch_batches")
        if decode_on_device not in (True, False, "auto"):
            raise ValueError(f"iter_torch_batches: decode_on_device must be True, False or 'auto', "
                             f"got {decode_on_device!r}")
        torch_side = _pytorch()
        on_device = torch_side.decodes_on_device(
            device, decode_on_device, torch_side.host_threads(iter_kwargs.get("num_threads")))
        # Before the run starts: its first batch buffers are already page-locked.
        pinned = torch_side.pin_batches(device, bool(pin_memory))
        try:
            it = self.iter(seed, epoch, **iter_kwargs, **({"device_decode": True} if on_device else {}))
            try:
                yield from torch_side.iter_torch_batches(
                    it, device, dict(dtypes or {}), bool(pin_memory), prefetch, specs, on_device
                )
            finally:
                it.close()
        finally:
            if pinned is not None:
                pinned.close()

    def iter_jax(
        self,
        seed: int = 0,
        epoch: int | None = None,
        *,
        device: Any = None,
        sharding: Any = None,
        dtypes: Mapping[str, Any] | None = None,
        normalize: Any = None,
        **iter_kwargs: Any,
    ) -> Iterator[dict]:
        """Batches as dicts of ``jax.Array``: each numpy field goes to ``device`` (default: JAX's
        default device) or is laid out by ``sharding`` with ``jax.device_put``; ``dtypes`` maps
        fields to the dtype they are cast to first (``{"image": jnp.bfloat16}``). Fields that are
        not arrays (strings, ragged lists) stay Python lists. Use it after ``batch()``.

        ``seed``, ``epoch`` and the other arguments are ``iter``'s: like a ``for`` loop, a call
        without ``epoch`` is the dataset's next epoch. Closing the generator (or breaking out of
        the loop and dropping it) stops the pipeline.

        Multi-host: give each process its shard, ``ds.shard(jax.process_index(),
        jax.process_count())``, and assemble the global batch from the local ones with
        ``jax.make_array_from_process_local_data(sharding, batch[k])`` (see README).

        ``normalize=(mean, std)`` (or ``{field: (mean, std)}``; default field ``image``) puts
        that field on the device as uint8 images ``[batch, H, W, C]`` and normalises it there:
        float32 ``(x / 255 - mean) / std`` as ``[batch, C, H, W]``, the values
        ``sluice.image.normalize`` gives on the host, for a quarter of the transfer.
        """
        jax = _jax()
        if dtypes is not None and not isinstance(dtypes, Mapping):
            raise TypeError(f"iter_jax: dtypes must be a dict {{field: dtype}}, got {type(dtypes).__name__}")
        if device is not None and sharding is not None:
            raise ValueError("iter_jax: give device or sharding, not both")
        place = sharding if sharding is not None else device
        casts = dict(dtypes or {})
        specs = normalize_spec(normalize, "iter_jax")
        on_device = _jax_normalizer(jax) if specs else None
        it = self.iter(seed, epoch, **iter_kwargs)
        try:
            for batch in it:
                if not isinstance(batch, dict):  # pragma: no cover - samples are dicts
                    raise TypeError(f"iter_jax: expected dict batches, got {type(batch).__name__}")
                missing = [k for k in casts if k not in batch]
                if missing:
                    raise KeyError(f"iter_jax: dtypes names field(s) {missing} not in the batch "
                                   f"(fields: {sorted(batch)})")
                check_images(batch, specs, "iter_jax")
                out = {}
                for k, v in batch.items():
                    if k in specs:
                        x = on_device(jax.device_put(v, place), *specs[k])
                        out[k] = x.astype(casts[k]) if k in casts else x
                    elif isinstance(v, np.ndarray) and v.dtype != object:
                        if k in casts:
                            v = v.astype(casts[k], copy=False)
                        out[k] = jax.device_put(v, place)
                    else:
                        if k in casts:
                            raise TypeError(f"iter_jax: field {k!r} is not an array "
                                            f"({type(v).__name__}); it cannot take a dtype")
                        out[k] = v
                yield out
        finally:
            it.close()
