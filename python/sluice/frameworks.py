"""Handing batches to a training framework: ``Dataset.iter_jax``.

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


class FrameworksMixin:
    """``Dataset`` methods that hand batches to a framework."""

    iter: Any  # Dataset.iter

    def iter_jax(
        self,
        seed: int = 0,
        epoch: int | None = None,
        *,
        device: Any = None,
        sharding: Any = None,
        dtypes: Mapping[str, Any] | None = None,
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
        """
        jax = _jax()
        if dtypes is not None and not isinstance(dtypes, Mapping):
            raise TypeError(f"iter_jax: dtypes must be a dict {{field: dtype}}, got {type(dtypes).__name__}")
        if device is not None and sharding is not None:
            raise ValueError("iter_jax: give device or sharding, not both")
        place = sharding if sharding is not None else device
        casts = dict(dtypes or {})
        it = self.iter(seed, epoch, **iter_kwargs)
        try:
            for batch in it:
                if not isinstance(batch, dict):  # pragma: no cover - samples are dicts
                    raise TypeError(f"iter_jax: expected dict batches, got {type(batch).__name__}")
                missing = [k for k in casts if k not in batch]
                if missing:
                    raise KeyError(f"iter_jax: dtypes names field(s) {missing} not in the batch "
                                   f"(fields: {sorted(batch)})")
                out = {}
                for k, v in batch.items():
                    if isinstance(v, np.ndarray) and v.dtype != object:
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
