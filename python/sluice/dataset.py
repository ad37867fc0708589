"""The Python face of sluice: a lazy, immutable ``Dataset`` and its ``Iterator``.

Logic lives in Rust; this module turns Python arguments into calls on ``sluice._native`` and
adds what only Python can do (inspecting a UDF's signature, a progress bar).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from . import _native, _recipe
from ._native import Op
from ._args import _bytes, _int
from .formats import FormatsMixin
from .frameworks import FrameworksMixin
from .inspection import InspectMixin
from .iterator import Iterator, Stats

if TYPE_CHECKING:
    from .context import Context
    from .optimizer import OptimizerOptions, Plan, Profile

Sample = dict


def _keys(op: str, key: Any) -> list[str]:
    keys = [key] if isinstance(key, str) else key
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"{op} key must be a field name or a list of field names, got {key!r}")
    return list(keys)


def _blocking(memory_budget: int | None, spill_dir: Any, seed: int) -> tuple:
    """The native (memory_budget, spill_dir, seed) arguments of a blocking op."""
    return (
        _int("memory_budget", memory_budget, 1, allow_none=True),
        None if spill_dir is None else str(spill_dir),
        _int("seed", seed, 0),
    )


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _wants_rng(fn: Callable) -> bool:
    try:
        return "rng" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Dataset(FormatsMixin, InspectMixin, FrameworksMixin):  # write_*/to_arrow; len/count/schema/show; iter_jax
    """A lazy pipeline. Each transformation returns a new ``Dataset``; nothing runs until you
    iterate.

    >>> import sluice
    >>> ds = sluice.range(8).filter(lambda s: s["id"] % 2 == 0).batch(2)
    >>> [b["id"].tolist() for b in ds]
    [[0, 2], [4, 6]]
    """

    def __init__(self, native: _native.Dataset):
        self._native = native
        # The epoch the next ``for`` loop (or ``iter()`` without ``epoch``) runs: iterations
        # started so far, so a program that loops E times sees epochs 0..E-1, and so does
        # its rerun.
        self._next_epoch = 0
        # The latest iteration's statistics (a handle that outlives its iterator) and context.
        self._last_stats: "_native.Stats | None" = None
        self._last_context: "Context | None" = None
        self._last_plan: "Plan | None" = None

    # Transformations -------------------------------------------------------------------
    @_recipe.step
    def map(
        self,
        fn_or_op: Callable[..., Sample] | Op,
        *,
        keep_position: bool | None = None,
        name: str | None = None,
        on_error: str = "raise",
    ) -> "Dataset":
        """Applies a built-in op or a Python function ``fn(sample) -> sample`` to every sample.

        A function that declares an ``rng`` parameter gets a ``numpy.random.Generator`` seeded
        from (seed, epoch, sample index, op), so its randomness is reproducible.
        ``on_error="skip"`` drops samples the op fails on, counts them in ``stats()`` and
        logs how many on the ``sluice`` logger when the iteration ends.

        A function must return a dict. When nothing after it reads the result's fields (no
        batch, built-in op or worker process follows, only other functions, ``limit`` and
        ``shuffle_buffer``), the loop gets that very dict with its values as the function
        made them (a tuple stays a tuple, any object passes); otherwise its values are
        converted as ``batch`` describes.

        >>> import sluice
        >>> rows = list(sluice.range(2).map(lambda s: {"id": s["id"], "pair": (s["id"], 1)}))
        >>> rows[1]["pair"]
        (1, 1)
        """
        if isinstance(fn_or_op, Op):
            return Dataset(self._native.map_op(fn_or_op, on_error, keep_position))
        from .text import PackStep

        if isinstance(fn_or_op, PackStep):  # sluice.text.pack(...): a stateful step
            return self.pack(**fn_or_op.kwargs)
        return self._udf(fn_or_op, "map", name, on_error, keep_position)

    @_recipe.step
    def pack(
        self,
        length: int,
        *,
        field: str = "input_ids",
        separator: int | None = None,
        drop_remainder: bool = False,
        pad_id: int = 0,
    ) -> "Dataset":
        """GPT-style packing: concatenates the 1-D integer ``field`` of consecutive samples
        (with ``separator`` after each, e.g. an EOS id) and cuts blocks of exactly ``length``
        tokens (``length`` at most 2**24): ``{field, attention_mask, segment_ids}``
        (``segment_ids`` numbers the samples in a block from 1 — a sample that adds no tokens,
        empty without a separator, takes none; padding has mask 0 and segment 0). Packing
        restarts every epoch; the
        last short block is padded with ``pad_id`` or dropped (``drop_remainder``). Other
        fields are dropped. Checkpoints save where the current block starts, not its tokens.

        >>> import sluice
        >>> ds = sluice.from_items([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
        >>> [b["input_ids"].tolist() for b in ds.pack(4, separator=0)]
        [[1, 2, 3, 0], [4, 5, 0, 0]]
        """
        if separator is not None:
            separator = _int("separator", separator, -(2**63))
        return Dataset(
            self._native.pack(
                _int("length", length, 1), str(field), separator, bool(drop_remainder), _int("pad_id", pad_id, -(2**63))
            )
        )

    @_recipe.step
    def filter(self, pred: Callable[[Sample], bool], *, name: str | None = None) -> "Dataset":
        """Keeps the samples for which ``pred(sample)`` is true."""
        return self._udf(pred, "filter", name, "raise", None)

    @_recipe.step
    def flat_map(self, fn: Callable[[Sample], Iterable[Sample]], *, name: str | None = None) -> "Dataset":
        """Replaces each sample by the samples ``fn(sample)`` yields."""
        return self._udf(fn, "flat_map", name, "raise", None)

    def _udf(self, fn: Any, mode: str, name: str | None, on_error: str, keep_position: bool | None) -> "Dataset":
        if not callable(fn):
            raise TypeError(f"{mode} needs a callable or a built-in op, got {type(fn).__name__}")
        return Dataset(
            self._native.map_udf(fn, name or _name(fn), mode, _wants_rng(fn), on_error, keep_position)
        )

    @_recipe.step
    def map_batches(self, fn: Callable[[dict], dict], batch_size: int, *, name: str | None = None) -> "Dataset":
        """Applies ``fn`` to batches (dicts of arrays/lists); the dataset continues as samples."""
        if not callable(fn):
            raise TypeError("map_batches needs a callable")
        return Dataset(self._native.map_batches_udf(fn, name or _name(fn), _int("batch_size", batch_size, 1)))

    @_recipe.step
    def batch(
        self, size: int, drop_last: bool = False, *, pad: "dict[str, float] | None" = None, ragged: bool = False
    ) -> "Dataset":
        """Stacks ``size`` samples into one batch: arrays gain a leading dimension (ints with
        floats become float64); strings, bytes, lists, arrays of one dtype but different
        shapes, and fields with ``None`` values become lists. A field mixing kinds (an array
        and an int) or array dtypes (float32 and int64) raises ``TypeError`` naming it, unless
        ``ragged=True``, which makes any field that does not stack a list (like tf.data's
        ``ragged_batch``). ``pad={"input_ids": 0, "attention_mask": 0}`` first pads those
        fields along their first axis to the longest in the batch.

        >>> import sluice, numpy as np
        >>> ds = sluice.from_items([{"ids": np.arange(n)} for n in (1, 3, 2)])
        >>> next(iter(ds.batch(3, pad={"ids": -1})))["ids"].tolist()
        [[0, -1, -1], [0, 1, 2], [0, 1, -1]]
        """
        if pad is not None and not isinstance(pad, dict):
            raise TypeError("pad must be a dict {field: pad value}")
        pairs = None if not pad else [(str(k), float(v)) for k, v in pad.items()]
        return Dataset(self._native.batch(_int("batch size", size, 1), bool(drop_last), pairs, bool(ragged)))

    @_recipe.step
    def shuffle(self, seed: int | None = None, *, reshuffle_each_epoch: bool = True) -> "Dataset":
        """Global shuffle of a random-access pipeline (O(1) memory), a new permutation every
        epoch: epoch k's derives from (seed, k) — ``seed`` fixes the family of permutations,
        the iteration's seed when None. ``reshuffle_each_epoch=False`` keeps one permutation
        (epoch 0's) for every epoch; augmentations still draw anew.

        >>> import sluice
        >>> ds = sluice.range(10).shuffle(seed=1)
        >>> a, b = [s["id"] for s in ds], [s["id"] for s in ds]   # epochs 0 and 1
        >>> a != b and sorted(a) == sorted(b)
        True
        >>> fixed = sluice.range(10).shuffle(seed=1, reshuffle_each_epoch=False)
        >>> [s["id"] for s in fixed] == [s["id"] for s in fixed] == a
        True
        """
        if not isinstance(reshuffle_each_epoch, bool):
            raise TypeError(f"reshuffle_each_epoch must be a bool, got {type(reshuffle_each_epoch).__name__}")
        return Dataset(self._native.shuffle(_int("seed", seed, 0, allow_none=True), reshuffle_each_epoch))

    @_recipe.step
    def shuffle_buffer(self, size: int, seed: int | None = None) -> "Dataset":
        """Seeded shuffle through a bounded buffer of ``size`` samples (for streams)."""
        return Dataset(self._native.shuffle_buffer(_int("size", size, 1), _int("seed", seed, 0, allow_none=True)))

    @_recipe.step
    def shard(self, rank: int, world_size: int, equal: bool = True, *, block: int = 1) -> "Dataset":
        """This rank's share of every epoch: every ``world_size``-th sample from ``rank``,
        disjoint across ranks; ``equal=True`` gives every rank the same length (dropping fewer
        than ``world_size`` samples), ``equal=False`` keeps them all. ``block=k`` deals runs of
        ``k`` consecutive positions instead of single ones (with a batch's size, whole
        batches). A second ``shard`` splits this rank's share further — how ``to_torch()``
        gives DataLoader workers disjoint parts of a DDP rank.

        >>> import sluice
        >>> [s["id"] for s in sluice.range(10).shard(1, 2, equal=False, block=2)]
        [2, 3, 6, 7]
        >>> [s["id"] for s in sluice.range(10).shard(0, 2).shard(1, 2)]
        [2, 6]
        """
        return Dataset(
            self._native.shard(
                _int("rank", rank, 0), _int("world_size", world_size, 1), bool(equal), _int("block", block, 1)
            )
        )

    @_recipe.step
    def repeat(self, epochs: int | None = None) -> "Dataset":
        """Repeats for ``epochs`` epochs (forever if None); randomness differs per epoch."""
        return Dataset(self._native.repeat(_int("epochs", epochs, 1, allow_none=True)))

    @_recipe.step
    def prefetch(self, n: int) -> "Dataset":
        """Keeps up to ``n`` outputs ready ahead of the consumer."""
        return Dataset(self._native.prefetch(_int("n", n, 1)))

    @_recipe.step
    def limit(self, n: int) -> "Dataset":
        """The first ``n`` outputs, lazily."""
        return Dataset(self._native.limit(_int("n", n, 0)))

    # Relational (blocking) ---------------------------------------------------------------
    @_recipe.step
    def sort(
        self,
        key: str | Sequence[str],
        descending: bool | Sequence[bool] = False,
        *,
        memory_budget: int | None = None,
        spill_dir: str | None = None,
        seed: int = 0,
    ) -> "Dataset":
        """Sorts by ``key`` (a field name, or a list of them, most significant first),
        stably: rows with equal keys keep their order. ``descending`` is one flag or one per
        key; missing values (None, NaN) come last either way, as in pandas. Keys must be
        numbers (ints and floats compare exactly), str, bytes or bool — one kind per field.

        Blocking: the first iteration runs the whole pipeline so far once (with ``seed``, not
        the iteration's), sorting within ``memory_budget`` bytes (default 256 MiB) and
        spilling sorted runs to ``spill_dir`` (default ``$TMPDIR``) beyond it, merged
        afterwards. The result is a random-access dataset (``shuffle``, ``shard``, ``batch``
        and ``state_dict`` work after it), the same for any thread count and budget; its
        files are deleted with the dataset. ``stats()["source"]`` reports runs and bytes.

        >>> import sluice
        >>> ds = sluice.from_items([{"k": k, "i": i} for i, k in enumerate([2, None, 1, 2])])
        >>> [(s["k"], s["i"]) for s in ds.sort("k", descending=True)]
        [(2, 0), (2, 3), (1, 2), (None, 1)]
        """
        keys = _keys("sort", key)
        flags = [bool(descending)] if isinstance(descending, (bool, int)) else [bool(d) for d in descending]
        return Dataset(_native.sort(self._native, keys, flags, *_blocking(memory_budget, spill_dir, seed)))

    def groupby(self, key: str | Sequence[str]) -> "GroupedDataset":
        """Groups by ``key`` (a field name or a list of them); finish with
        ``.aggregate(...)``, which gives one row per group sorted by key.

        >>> import sluice
        >>> from sluice import agg
        >>> ds = sluice.from_items([{"label": l, "n": n} for l, n in [("b", 1), ("a", 2), ("b", 3)]])
        >>> ds.groupby("label").aggregate(agg.count(), mean_n=agg.mean("n")).take(5)
        [{'label': 'a', 'count()': 1, 'mean_n': 2.0}, {'label': 'b', 'count()': 2, 'mean_n': 2.0}]
        """
        return GroupedDataset(self, _keys("groupby", key))

    def aggregate(
        self,
        *aggs: Any,
        memory_budget: int | None = None,
        spill_dir: str | None = None,
        seed: int = 0,
        **named: Any,
    ) -> "Dataset":
        """One row of aggregates over the whole dataset (``groupby`` with no key).

        >>> import sluice
        >>> from sluice import agg
        >>> sluice.range(10).aggregate(agg.count(), total=agg.sum("id")).take(1)
        [{'count()': 10, 'total': 45}]
        """
        return GroupedDataset(self, []).aggregate(
            *aggs, memory_budget=memory_budget, spill_dir=spill_dir, seed=seed, **named
        )

    @_recipe.step
    def _aggregate(
        self, keys: list, aggs: list, memory_budget: int | None, spill_dir: str | None, seed: int
    ) -> "Dataset":
        # The recorded form of groupby().aggregate(): plain lists, so recipes pickle.
        return Dataset(_native.aggregate(self._native, keys, aggs, *_blocking(memory_budget, spill_dir, seed)))

    @_recipe.step
    def repartition(
        self, n: int, *, memory_budget: int | None = None, spill_dir: str | None = None, seed: int = 0
    ) -> "Dataset":
        """Materialises the outputs into ``n`` equal, contiguous partitions (sizes differ by
        at most one; order kept). ``write_parquet``/``write_jsonl`` then write one file per
        partition (``part-00000`` … for partitions with rows; ``rows_per_file`` is ignored),
        as long as only ``map``/``filter``/``flat_map`` come after it. Blocking like
        ``sort``: rows beyond ``memory_budget`` bytes go to one file in ``spill_dir``.

        >>> import sluice, tempfile
        >>> len(sluice.range(10).repartition(3).write_jsonl(tempfile.mkdtemp()))
        3
        """
        return Dataset(_native.repartition(self._native, _int("n", n, 1), *_blocking(memory_budget, spill_dir, seed)))

    # Execution -------------------------------------------------------------------------
    @_recipe.step
    def cache(self, budget_bytes: int = 1 << 30, disk_bytes: int = 0) -> "Dataset":
        """Computes the steps so far once per source sample and keeps the results in memory
        (up to ``budget_bytes``), and what does not fit in a temporary file (up to
        ``disk_bytes``; removed with the cache), for later epochs and iterations. Only
        deterministic maps may come before it (put random augmentations after it).

        >>> import sluice
        >>> ds = sluice.range(4).map(lambda s: {"id": s["id"] + 1}).cache().repeat(2)
        >>> [s["id"] for s in ds]
        [1, 2, 3, 4, 1, 2, 3, 4]
        """
        return Dataset(
            _native.cache(self._native, _int("budget_bytes", budget_bytes, 0), _int("disk_bytes", disk_bytes, 0))
        )

    # Optimizer ---------------------------------------------------------------------------
    def profile(self, samples: int = 200, seconds: float = 10.0, seed: int = 0, epoch_share: float = 0.0) -> "Profile":
        """Runs up to ``samples`` source samples (at most ``seconds``) op by op in this thread
        and measures each op: CPU time (thread clock), wall time, bytes in/out, selectivity.
        ``epoch_share`` > 0 runs at most that share of one epoch's source samples (at least
        16) when the source's length is known, so profiling costs about that share of an
        epoch (``iter(optimize=True)`` uses 0.01)."""
        from .optimizer import Profile

        if isinstance(epoch_share, bool) or not isinstance(epoch_share, (int, float)) or not 0 <= epoch_share <= 1:
            raise ValueError(f"epoch_share must be a number from 0 to 1, got {epoch_share!r}")
        return Profile(
            _native.profile(
                self._native, _int("samples", samples, 1), float(seconds), _int("seed", seed, 0), float(epoch_share)
            )
        )

    def optimize(
        self,
        profile: "Profile | None" = None,
        options: "OptimizerOptions | None" = None,
        seed: int = 0,
        context: "Context | None" = None,
    ) -> "Plan":
        """A ``Plan`` for this pipeline from ``profile`` (taken now if None): op order,
        stages, variants, parallelism, cache point and the predicted throughput. With a Ray
        ``context`` and ``enable_offload``, the offload rule may put stages on Ray actors
        (``context.optimize(ds)`` fills in the cluster's CPUs and prices)."""
        from .optimizer import OptimizerOptions, Plan

        profile = profile if profile is not None else self.profile()
        options = options if options is not None else OptimizerOptions()
        factory = None
        if context is not None and context.remote:
            if options.enable_offload and options.remote_cpus is None:
                options = context.optimizer_options(options)
            factory = context._pool
        return Plan(
            _native.optimize(self._native, profile.to_json(), options.to_json(), _int("seed", seed, 0), factory)
        )

    @_recipe.step
    def iter(
        self,
        seed: int = 0,
        epoch: int | None = None,
        num_threads: int | None = None,
        *,
        progress: bool = False,
        chunk_size: int | None = None,
        plan: "Plan | None" = None,
        optimize: "bool | OptimizerOptions" = False,
        context: "Context | None" = None,
        processes: int | None = None,
        fuse_ops: bool = True,
        stats_port: int | None = None,
        on_stats: "Callable[[Stats], Any] | None" = None,
        stats_interval: float = 10.0,
        memory_limit: "int | str | bool | None" = None,
        device_decode: bool = False,
    ) -> "Iterator":
        """Starts an iteration at ``epoch``: its permutations and augmentation draws are
        epoch ``epoch``'s, derived from (seed, epoch). ``epoch=None`` (and ``for … in ds``)
        takes this dataset's next epoch — 0, 1, 2, … as loops start — so every pass
        reshuffles and a rerun of the program repeats the sequence; an explicit ``epoch``
        (a trainer that owns the epoch counter) does not advance it. With ``repeat(n)``
        an iteration runs data epochs ``epoch*n`` … ``epoch*n + n-1``. ``it.epoch`` says
        which; ``state_dict()`` carries it. ``num_threads`` is per parallel stage (default: all cores);
        results do not depend on it. ``num_threads=0`` runs every stage in the iterating
        thread, as ``DataLoader(num_workers=0)`` does (only the source reads ahead on its own
        thread): fastest for pure-Python functions when the loop does nothing else, since
        they need the GIL the loop holds; the default background threads instead prepare
        batches while a training step releases the GIL (accelerator waits, I/O, numpy).
        ``progress=True`` shows a progress bar on stderr (tqdm's when it is installed, with
        the total when ``len(ds)`` is known; else one line of counts); off by default.
        ``plan=`` runs an optimizer plan; ``optimize=True`` (or ``OptimizerOptions``) profiles,
        plans and runs in one step: the first such iteration runs the default plan and times
        its ops as it goes, and later ones run the plan made from those timings (``it.plan``,
        see ``Iterator.plan``), so profiling costs no share of an epoch. ``context=`` says where
        to run: ``sluice.Context(ray_address=...)`` puts every element-wise stage on Ray
        actors, or — with ``optimize=True`` — the stages the cost model says pay.
        ``processes=N`` runs every stage of Python functions in N worker processes (spawned,
        so each has its own GIL; big arrays cross in shared memory); outputs are the same.
        ``fuse_ops=False`` turns off op fusion: by default ``image.decode`` directly followed
        by ``image.random_resized_crop`` runs as one op that decodes a JPEG at 1/2–1/8 scale
        when the crop is shrunk enough (same crops, pixels within ≥ 35 dB PSNR; see
        docs/ARCHITECTURE.md); off, every op computes exactly. Exact plans never fuse.
        It also lets a loop straight over ``read_parquet`` read its rows 1,024 at a time as
        Arrow columns (the same rows, checkpoints and errors; off: one row at a time).
        ``stats_port=`` serves live statistics in the Prometheus text format on
        ``127.0.0.1:<port>/metrics`` (0: a free port, ``it.stats_address``); ``on_stats=fn``
        calls ``fn(it.stats())`` every ``stats_interval`` seconds from a background thread
        (see ``sluice.metrics``). Both stop with the iteration.
        ``memory_limit=`` caps the resident memory of this process and its worker processes
        (bytes, or ``"8GB"``; default 80 % of the machine's or container's memory;
        ``False`` no cap): the source holds chunks back while the next would not fit, so
        queues hold less when samples are big; ``stats()`` says how long it held and the
        peak it saw, and a warning at the end of the iteration says when the cap cost
        throughput.
        ``device_decode=True`` says the consumer decodes images on its GPU (what
        ``iter_torch_batches(decode_on_device=...)`` sets): a ``decode`` +
        ``random_resized_crop`` (+ ``horizontal_flip``) whose pixels nothing reads before the
        batch then leave the field's encoded bytes in the batch, and ``<field>_draws`` the
        crop box and flip the host would have drawn."""
        live = None
        if stats_port is not None or on_stats is not None:
            if on_stats is not None and not callable(on_stats):
                raise TypeError(f"on_stats must be callable, got {type(on_stats).__name__}")
            if isinstance(stats_interval, bool) or not isinstance(stats_interval, (int, float)) or not stats_interval > 0:
                raise ValueError(f"stats_interval must be a number of seconds > 0, got {stats_interval!r}")
            if stats_port is not None and _int("stats_port", stats_port, 0) > 65535:
                raise ValueError(f"stats_port must be <= 65535, got {stats_port}")
            live = {"port": stats_port, "on_stats": on_stats, "interval": float(stats_interval)}
        if epoch is not None:
            epoch = _int("epoch", epoch, 0)
            if epoch >= 2**64:
                raise ValueError(f"epoch must be < 2**64, got {epoch}")
        options = None
        if optimize and plan is None:
            from .optimizer import OptimizerOptions

            options = optimize if isinstance(optimize, OptimizerOptions) else OptimizerOptions()
            if context is not None and context.remote:
                if not isinstance(optimize, OptimizerOptions):
                    options = dataclasses.replace(options, enable_offload=True)
                if options.enable_offload and options.remote_cpus is None:
                    options = context.optimizer_options(options)
        start = self._native.iter if context is None else context.starter(self._native)
        native = start(
            _int("seed", seed, 0),
            _int("num_threads", num_threads, 0, allow_none=True),
            _int("chunk_size", chunk_size, 1, allow_none=True),
            plan.to_json() if plan is not None else None,
            **({} if processes is None else {"processes": _int("processes", processes, 1)}),
            **({} if fuse_ops else {"fuse_ops": False}),
            **({} if options is None else {"optimize_json": options.to_json()}),
            **({} if memory_limit is None else {"memory_limit": _memory_limit(memory_limit)}),
            **({"device_decode": True} if device_decode else {}),
            epoch=self._next_epoch if epoch is None else epoch,
        )
        if epoch is None:
            self._next_epoch += 1
        it = Iterator(native, progress, self._total() if progress else None, live)
        it.plan = plan
        if options is not None:  # the plan optimize made (or will make from this run)
            it._planning = native.plan
        it._context = context
        self._last_stats, self._last_context, self._last_plan = native.stats_handle(), context, it.plan
        it._owner = self
        return it

    def __iter__(self) -> "Iterator":
        return self.iter()

    def _total(self) -> int | None:
        try:
            return len(self)
        except TypeError:  # not known without running: a bar without a total
            return None

    def split(self, n: int, equal: bool = True) -> "list[Dataset]":
        """``n`` datasets, one per trainer: disjoint shards of equal length (``shard(r, n,
        equal)`` placed where the pipeline still has random access), each iterated on its own,
        so a slow consumer never stalls the others. They pickle, e.g. to Ray Train workers.

        >>> import sluice
        >>> parts = sluice.range(10).shuffle(seed=3).batch(2).split(2)
        >>> [sorted(i for b in p for i in b["id"].tolist()) for p in parts]
        [[2, 3, 4, 7, 8], [0, 1, 5, 6, 9]]
        """
        n, equal = _int("n", n, 1), bool(equal)
        return [self._with_shards([{"rank": rank, "world_size": n, "equal": equal}]) for rank in range(n)]

    @_recipe.step
    def _with_shards(self, shards: "list[dict]") -> "Dataset":
        """This pipeline with ``shard(**kw)`` for each of ``shards`` (a rank's, then a
        DataLoader worker's within it) where it still has random access — after the last
        sort/groupby/repartition and the steps that keep positions (the engine's
        ``split_point``). A recorded step, so a part pickles and its copy, rebuilt the same
        way, has the same fingerprint: a checkpoint of one loads into the other.

        >>> import sluice
        >>> part = sluice.range(6).batch(2)._with_shards([{"rank": 1, "world_size": 2}])
        >>> [b["id"].tolist() for b in part]
        [[1, 3], [5]]
        """
        native = [
            (
                _int("rank", kw["rank"], 0),
                _int("world_size", kw["world_size"], 1),
                bool(kw.get("equal", True)),
                _int("block", kw.get("block", 1), 1),
            )
            for kw in shards
        ]
        return Dataset(self._native.with_shards(native))

    def __reduce__(self) -> tuple:
        # Pickles the recipe (source call + steps), never native objects: see _recipe.
        return _recipe.reduce_dataset(self)

    def take(self, n: int) -> list:
        """The first ``n`` outputs of epoch 0 as a list (a look at the data: it does not
        advance the epoch ``for`` loops run)."""
        with self.limit(n).iter(epoch=0, progress=False) as it:
            return list(it)

    def stats(self) -> "Stats | None":
        """Statistics of the latest iteration of this dataset (None before any)."""
        if self._last_stats is None:
            return None
        return Stats.of(self._last_stats, self._last_context)

    def explain(
        self,
        seed: int = 0,
        num_threads: int | None = None,
        plan: "Plan | None" = None,
        processes: int | None = None,
        fuse_ops: bool = True,
    ) -> str:
        """The logical plan and the physical plan this dataset runs with (under ``plan``,
        with ``processes`` worker processes for Python stages, with or without op fusion).
        A fused op shows under its own name, e.g. ``decode_random_resized_crop``."""
        return (
            "logical plan:\n"
            + self._native.logical_plan()
            + "\n\nphysical plan:\n"
            + self._native.physical_plan(
                seed,
                num_threads,
                None,
                plan.to_json() if plan is not None else None,
                processes=processes,
                fuse_ops=bool(fuse_ops),
            )
        )

    def __repr__(self) -> str:
        return "Dataset(\n  " + self._native.logical_plan().replace("\n", "\n  ") + "\n)"


class GroupedDataset:
    """A dataset grouped by key fields (``Dataset.groupby``), waiting for ``aggregate``."""

    def __init__(self, ds: Dataset, keys: list[str]):
        self._ds = ds
        self._keys = keys

    def aggregate(
        self,
        *aggs: Any,
        memory_budget: int | None = None,
        spill_dir: str | None = None,
        seed: int = 0,
        **named: Any,
    ) -> Dataset:
        """One row per group: the key fields, then the aggregates, sorted by key (missing
        keys last, as one group). Aggregates are ``sluice.agg`` objects — positional ones
        are named like Ray Data's (``count()``, ``sum(x)``), keyword ones by their keyword —
        or pandas-style ``name=("field", "func")`` tuples with func one of count, sum, mean,
        min, max. Blocking like ``Dataset.sort``: group states beyond ``memory_budget`` bytes
        are spilled to ``spill_dir`` in hash partitions and reduced one partition at a time;
        the result does not depend on the budget or the thread count."""
        from . import agg

        triples = agg.normalize(aggs, named)
        return self._ds._aggregate(list(self._keys), triples, memory_budget, spill_dir, seed)

    def __repr__(self) -> str:
        return f"GroupedDataset(keys={self._keys!r})"


def _memory_limit(value: Any) -> int:
    """``memory_limit=`` as the native run takes it: bytes, 0 for no cap."""
    if value is False:
        return 0
    limit = _bytes("memory_limit", value)
    if limit <= 0:
        raise ValueError(f"memory_limit must be > 0 bytes (False: no cap), got {value!r}")
    return limit
