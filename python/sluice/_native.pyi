"""Type stubs of the Rust extension (keep in sync with crates/sluice-py)."""

from typing import Any, Callable

__version__: str

class SluiceError(RuntimeError): ...
class PipelineError(SluiceError): ...

class Op:
    """A built-in op from its JSON spec (``{"op": "image.resize", "size": 224}``). A bad spec
    raises ``ValueError`` (a bad value, an unknown op or argument, a size above the op's
    ``max_pixels``/``max_samples``/``max_tokens``) or ``TypeError`` (a wrong type), naming the
    op, the argument and the value."""

    def __init__(self, spec_json: str) -> None: ...
    @property
    def name(self) -> str: ...
    def spec_json(self) -> str: ...

class Iterator:
    """Threads may share one: their ``__next__`` calls take turns (each output goes to one
    of them); ``close()`` from another thread ends a waiting ``__next__``."""

    def __iter__(self) -> Iterator: ...
    def __next__(self) -> dict[str, Any]: ...
    @property
    def count(self) -> int: ...
    @property
    def running(self) -> bool:
        """Whether the run still holds its threads (not exhausted, closed or failed)."""
    @property
    def epoch(self) -> int:
        """The iteration's epoch (``iter(epoch=...)``, or a loaded checkpoint's)."""
    def close(self) -> None: ...
    def stats_handle(self) -> Stats: ...
    def plan(self) -> str | None:
        """The optimizer plan this run executes (JSON): the one given, or with
        ``optimize_json`` the one made from the first such run's step times (None before)."""
    def state_dict_json(self) -> str: ...
    def load_state_dict_json(self, state: str, strict: bool = True) -> None: ...
    def __enter__(self) -> Iterator: ...
    def __exit__(self, a: Any, b: Any, c: Any) -> None: ...

def read_small_file(path: str, what: str) -> str:
    """The text of ``path``, a ``what``: only a regular file of at most 16 MiB, UTF-8 (OSError
    for a FIFO or a device, ValueError for a larger or non-UTF-8 file)."""
def elastic_state_json(states: list[str]) -> str: ...
def cli_main(argv: list[str]) -> int:
    """Runs the ``sluice`` command line (crates/sluice-cli) on ``argv`` (program name first)
    without the GIL and returns its exit status: 0, 1 (the pipeline failed) or 2 (usage)."""
class PinGuard:
    """Batch buffers are page-locked while this is open."""
    def close(self) -> None: ...
    def __enter__(self) -> "PinGuard": ...
    def __exit__(self, *exc: object) -> None: ...

def pin_buffers(pinner: str | tuple[int, int]) -> PinGuard:
    """Page-lock batch buffers: "mlock", or the addresses of cudaHostRegister and cudaHostUnregister."""
def pin_stats() -> dict[str, int]:
    """locked, locked_bytes, locks, unlocks, failed, last_error."""
def cores() -> int:
    """The cores this process may run on (affinity and CPU quota): what the engine's default
    thread counts take.

    >>> cores() >= 1
    True
    """
    ...

def join_stopped() -> bool:
    """Waits (up to 10 s) for the workers of runs an error or Ctrl-C ended while they were in
    a call, then for the object cache's queued writes; called at interpreter exit. False if
    some were still running."""
def render_report(stats_json: str, logical_plan: str, plan_json: str | None = None,
                  title: str = "sluice pipeline report") -> str:
    """The HTML report page (``sluice::report``) of one run's statistics (``Stats.to_dict()``
    as JSON), the logical plan's text and the optimizer plan's JSON; ValueError for bad JSON."""
def write_report(path: str, html: str) -> None:
    """Writes a report page atomically (a local path or a bucket URL)."""

class Stats:
    def stats_json(self) -> str: ...
    def stats_text(self) -> str: ...

# The live-metrics endpoint (crates/sluice-py/src/metrics.rs, sluice-core's stats::endpoint).
class MetricsServer:
    """Serves ``stats`` in the Prometheus text format on 127.0.0.1:``port`` (0: a free one)
    until closed; raises ``OSError`` naming the port when it cannot be served."""
    def __init__(self, stats: Stats, port: int, max_connections: int = 16, idle_timeout_s: float = 5.0) -> None: ...
    @property
    def address(self) -> tuple[str, int]: ...
    def connections(self) -> int: ...
    def follow(self, stats: Stats) -> None: ...
    def close(self) -> None: ...

def prometheus_text(stats: Stats) -> str: ...

class Dataset:
    @staticmethod
    def range(n: int) -> Dataset: ...
    @staticmethod
    def from_items(items: list[dict[str, Any]]) -> Dataset: ...
    def source_spec(self) -> str | None:
        """The spec JSON this dataset reopens from (``open_source``) when it is only a
        reopenable source; ``None`` otherwise."""
    def map_op(self, op: Op, on_error: str = "raise", keep_position: bool | None = None) -> Dataset: ...
    def map_udf(
        self,
        func: Callable[..., Any],
        name: str,
        mode: str,
        wants_rng: bool = False,
        on_error: str = "raise",
        keep_position: bool | None = None,
    ) -> Dataset: ...
    def map_batches_udf(self, func: Callable[..., Any], name: str, batch_size: int) -> Dataset: ...
    def batch(
        self, size: int, drop_last: bool, pad: list[tuple[str, float]] | None = None, ragged: bool = False
    ) -> Dataset: ...
    def shuffle(self, seed: int | None = None, reshuffle_each_epoch: bool = True) -> Dataset: ...
    def shuffle_buffer(self, size: int, seed: int | None = None) -> Dataset: ...
    def shard(self, rank: int, world_size: int, equal: bool, block: int = 1) -> Dataset: ...
    def split_point(self) -> tuple[bool, int | None]:
        """(whether the pipeline is sharded where a shard can go — before a sort too — and
        the size of a batch right after that place)."""
    def with_shards(self, shards: list[tuple[int, int, bool, int]]) -> Dataset:
        """A ``shard(rank, world_size, equal, block)`` for each tuple, at ``split_point()``."""
    def repeat(self, epochs: int | None = None) -> Dataset: ...
    def prefetch(self, n: int) -> Dataset: ...
    def limit(self, n: int) -> Dataset: ...
    def pack(
        self, length: int, field: str, separator: int | None = None, drop_remainder: bool = False, pad_id: int = 0
    ) -> Dataset: ...
    def source_len(self) -> int | None: ...
    def length(self) -> int:
        """The number of outputs the plan knows; ``TypeError`` saying why it does not."""
    def count(self, seed: int = 0, num_threads: int | None = None, processes: int | None = None) -> int:
        """The known length, or a run that counts the outputs; ``ValueError`` if it repeats forever."""
    def field_names(self) -> list[str] | None: ...
    def class_names(self) -> list[str] | None: ...
    def logical_plan(self) -> str: ...
    def physical_plan(
        self,
        seed: int = 0,
        num_threads: int | None = None,
        chunk_size: int | None = None,
        plan_json: str | None = None,
        processes: int | None = None,
        fuse_ops: bool = True,
        actors: int | None = None,
    ) -> str: ...
    def iter(
        self,
        seed: int = 0,
        num_threads: int | None = None,
        chunk_size: int | None = None,
        plan_json: str | None = None,
        processes: int | None = None,
        fuse_ops: bool = True,
        ray_factory: Callable[[str, int, str], Any] | None = None,
        actors: int | None = None,
        epoch: int = 0,
        time_ops: bool = False,
        optimize_json: str | None = None,
        memory_limit: int | None = None,
        device_decode: bool = False,
    ) -> Iterator:
        """Starts a run at ``epoch`` (crates/sluice-py/src/options.rs). ``processes``: every Python stage
        on that many worker processes. ``ray_factory`` (a Ray context's ``_pool``) makes the
        ``ray`` backend's pools; ``actors``: every element-wise stage that can travel runs on
        that many actors per stage, unless the plan placed its stages (``enable_offload``).
        ``time_ops``: time each op as the run goes, for ``run_profile``. ``optimize_json``:
        ``OptimizerOptions`` for ``optimize=True`` (its plan: ``Iterator.plan()``)."""

# Stages in other processes (crates/sluice-py/src/worker.rs, crates/sluice-remote).
class ChainWorker:
    """Runs one stage of a pipeline on chunks sent by another process (a pool worker, a Ray
    actor). ``init`` is the stage's JSON the main process made; ``run`` takes a request frame
    and returns the reply frame (the output chunk, or the stage's typed error); ``run_split``
    returns the frame without its big buffers plus those buffers as uint8 numpy arrays that
    own the output's memory (pickle protocol 5 carries them out of band)."""

    def __init__(self, init: str) -> None: ...
    def run(self, chunk: bytes) -> bytes: ...
    def run_split(self, chunk: bytes, threshold: int = 32768) -> tuple[bytes, list[Any]]: ...

# The shared service's native pieces (crates/sluice-py/src/service.rs over
# sluice_remote::service); the actors carrying them are sluice._service_actors.
class StageDetached(RuntimeError):
    """A service worker no longer hosts the job's stage (detached, or the job's lease
    expired): attach again and resend; nothing was computed."""

class ServiceHost:
    """One service worker: the stages of every job attached to it (one engine per stage key),
    their chunks run in weighted fair order on ``slots`` slots, and a shared stream per stage
    (jobs sending the same chunks compute each once; ``window_bytes`` bounds the replies kept
    for slower jobs). ``node_cache``: ``(service, directory or None, bytes or None)`` of the
    prefix cache's tier on this node (records kept and read back without the shards)."""

    def __init__(
        self,
        slots: int = 1,
        window_bytes: int = 268435456,
        node_cache: tuple[str, str | None, int | None] | None = None,
    ) -> None: ...
    def attach(self, job: int, weight: float, init: str) -> str:
        """Attaches ``job`` to the stage ``init`` describes (built unless another job did);
        returns the stage key."""
    def run(self, job: int, key: str, frame: bytes) -> Any:
        """One request frame of ``job``'s stage ``key``: its split reply ``(frame, [uint8
        arrays])``, or, when several jobs of a stream read it, a Ray object reference to it
        (put once). Raises ``StageDetached`` when the job is not attached to ``key``."""
    def prefix_plan(self, job: int, key: str, frame: bytes, shards: int) -> tuple[str, list[list[int]]] | None:
        """Where the records of the chunk's cached prefix are: ``(prefix key, source indices
        per shard)``, or None when the stage has no prefix worth caching."""
    def run_cached(
        self, job: int, key: str, frame: bytes, cached: list[tuple[list[int], Any, list[int]]], fetch_s: float, shards: int
    ) -> tuple[Any, list[list[tuple[int, bytes]]], float]:
        """``run`` with the prefix's records found in the cache (fetched in ``fetch_s``): the
        reply (as ``run``'s), the records computed here grouped by shard (to store) and the
        seconds one took to compute."""
    def detach(self, job: int, key: str) -> bool: ...
    def forget(self, job: int) -> int: ...
    def report(self) -> dict[str, Any]:
        """``slots``, ``busy_s``, ``running``, ``queued``, ``stages``, ``jobs`` (per job id:
        ``weight``, ``chunks``, ``samples``, ``busy_s``, ``queue_wait_s``, ``stream_hits``,
        ``queued``) and ``stream`` (``computed``, ``hits``, ``waits``, ``evicted``)."""

class ServiceRegistry:
    """The dispatcher's state and decisions: jobs and leases, workers, which worker a job's
    stage attaches to, and the pool's size each window. Times are the caller's monotonic
    seconds."""

    def __init__(
        self,
        min_workers: int = 1,
        max_workers: int = 8,
        worker_cpus: float = 1.0,
        lease_s: float = 5.0,
        window_s: float = 2.0,
        target_util: float = 0.8,
        idle_windows: int = 2,
    ) -> None: ...
    def register(self, now: float, label: str, weight: float, stage_keys: list[str]) -> int: ...
    def heartbeat(self, now: float, job: int, samples: int, backlogged: bool) -> None: ...
    def unregister(self, job: int) -> bool: ...
    def expire(self, now: float) -> list[int]: ...
    def add_worker(self, now: float, id: str, node: str) -> None: ...
    def remove_worker(self, id: str) -> bool: ...
    def worker_beat(self, now: float, id: str, report: str) -> None: ...
    def lease(self, job: int, avoid: list[str]) -> str | None: ...
    def release(self, job: int, worker: str) -> None: ...
    def scale(self, now: float, starting: int) -> tuple[str, Any]:
        """``("hold", None)``, ``("start", n)`` or ``("retire", [worker ids])``."""
    def serve_metrics(self, port: int) -> tuple[str, int]:
        """Serves the service's metrics (Prometheus text) on 127.0.0.1:``port``; the address."""
    def status(self, now: float) -> dict[str, Any]: ...

class PrefixCache:
    """One shard of the service's prefix cache: records by (prefix key, source index) within
    ``budget`` bytes, kept by their value (CPU saved per byte per second)."""

    def __init__(self, budget: int) -> None: ...
    def get_many(self, now: float, prefix: str, indices: list[int]) -> tuple[Any, list[int]]:
        """The records found, end to end in one uint8 array, and each index's record
        length (-1: not cached here)."""
    def put_many(self, now: float, prefix: str, compute_s: float, records: list[tuple[int, bytes]]) -> int: ...
    def report(self, now: float) -> dict[str, Any]: ...

def stage_key(init: str) -> str:
    """The content key of a stage's init message (jobs with equal keys share its engine)."""

def pin_local_files(init: str) -> str:
    """``init`` with the local files its source names pinned (their sizes and modification
    times now), so a service's stage and prefix keys follow the files."""

# The `ray` backend's pool (crates/sluice-py/src/ray_pool.rs over sluice_remote::actor_pool).
class ActorPool:
    """One stage's pool on Ray actors (and local workers): every scheduling decision in Rust,
    Ray's calls through ``shim`` (``sluice.ray_backend.RayShim``). Made by a Ray context's
    ``_pool`` (the ``ray_factory``); the run starts it (``started``) and shuts it down."""

    def __init__(
        self,
        shim: Any,
        workers: int,
        label: str,
        *,
        in_flight_per_actor: int = 2,
        local_workers: int = 0,
        max_retries: int = 3,
        actor_start_timeout_s: float = 60.0,
        actor_cpus: float = 1.0,
        autoscale: bool = False,
        autoscale_window_s: float = 2.0,
        min_actors: int = 1,
        max_actors: int | None = None,
        max_local_workers: int | None = None,
        local_cpu_price: float = 0.0,
        remote_cpu_price: float = ...,
        target_throughput: float | None = None,
        slack: float = 0.05,
    ) -> None: ...
    @property
    def label(self) -> str: ...
    @property
    def started(self) -> bool: ...
    @property
    def parallelism(self) -> int: ...
    def report(self) -> dict[str, Any]:
        """``stage``, ``chunks``, ``samples``, ``retries``, ``retry_causes``, ``sent_bytes``,
        ``received_bytes``, ``slots`` (per worker), ``placement``, ``decisions``, ``events``."""
    def actor_handles(self) -> list[Any]:
        """The live actors' Ray handles."""
    def shutdown(self) -> None: ...

def _serve_worker(fd_in: int, fd_out: int) -> None:
    """The loop of ``python -m sluice._worker``: init frame, then request/reply frames."""

# Sources that reopen from a spec (crates/sluice-py/src/sources.rs).
def open_source(spec: str) -> tuple[Dataset, int]: ...
def load_pipeline(path: str) -> tuple[Dataset, int, int | None]: ...
def configure_storage(prefix: str, options: dict[str, str]) -> None: ...
# cache: (cache_dir, cache_limit) of the node-local object cache; None: the default one;
# limit 0: no cache.
_Cache = tuple[str | None, int | None] | None

def read_files(paths: list[str], cache: _Cache = None) -> Dataset: ...
def read_images(paths: list[str], parent_dir_labels: bool, cache: _Cache = None) -> Dataset: ...
def read_parquet(paths: list[str], columns: list[str] | None = None, cache: _Cache = None) -> Dataset: ...
def read_csv(
    paths: list[str],
    schema: dict[str, str],
    delimiter: str | None = None,
    has_header: bool = True,
    on_error: str = "raise",
    cache: _Cache = None,
) -> tuple[Dataset, int]: ...
def read_jsonl(
    paths: list[str], schema: dict[str, str], on_error: str = "raise", errors: str = "strict", cache: _Cache = None
) -> tuple[Dataset, int]: ...
def read_text(
    paths: list[str], on_error: str = "raise", errors: str = "strict", cache: _Cache = None
) -> tuple[Dataset, int]: ...
def read_webdataset(
    paths: list[str],
    rank: int | None = None,
    world_size: int | None = None,
    shuffle_shards: bool = False,
    shuffle_seed: int | None = None,
    on_error: str = "raise",
    max_member_size: int = 1073741824,
    cache: _Cache = None,
    index: bool = False,
    index_dir: str | None = None,
) -> Dataset: ...
def read_tfrecord(
    paths: list[str],
    compression: str | None = None,
    index: list[str] | None = None,
    features: list[str] | None = None,
    parse: bool = True,
    cache: _Cache = None,
) -> Dataset: ...

# The user's own data (crates/sluice-py/src/user_source.rs).
def from_source(obj: Any, len: int, field: str, type_name: str) -> Dataset: ...
def from_generator(func: Any, field: str, fn_name: str) -> Dataset: ...

# Data at rest (crates/sluice-py/src/formats.rs).
def from_arrow_stream(capsule: Any) -> Dataset: ...
def write_parquet(
    ds: Dataset, dir: str, rows_per_file: int, rows_per_group: int, seed: int = 0, num_threads: int | None = None
) -> list[str]: ...
def write_jsonl(ds: Dataset, dir: str, rows_per_file: int, seed: int = 0, num_threads: int | None = None) -> list[str]: ...
def write_shards(
    ds: Dataset,
    dir: str,
    format: str,
    shard_bytes: int,
    seed: int = 0,
    num_threads: int | None = None,
    ray_factory: Callable[[str, int, str], Any] | None = None,
    actors: int | None = None,
) -> list[str]: ...
def to_arrow_stream(ds: Dataset, batch_rows: int, seed: int = 0, num_threads: int | None = None) -> Any: ...

# Caching, profiling and planning (crates/sluice-py/src/optimizer.rs); JSON in and out.
def cache(ds: Dataset, budget: int, disk_budget: int = 0) -> Dataset: ...
def profile(ds: Dataset, samples: int, seconds: float, seed: int = 0, epoch_share: float = 0.0) -> str: ...
def profile_text(json: str) -> str: ...
def run_profile(ds: Dataset, stats: Stats, samples: int, epoch_share: float = 0.0) -> str | None:
    """A profile (JSON) of ``ds`` from a run of it started with ``time_ops=True``
    (``stats``: its ``stats_handle()``), once it has read as many samples as ``profile`` with
    these settings would run; None before."""
def optimize(
    ds: Dataset,
    profile_json: str,
    options_json: str,
    seed: int = 0,
    ray_factory: Callable[[str, int, str], Any] | None = None,
) -> str: ...
def predict(ds: Dataset, profile_json: str, plan_json: str, options_json: str) -> str: ...
def offload_plan(
    ds: Dataset,
    actors: int,
    seed: int = 0,
    num_threads: int | None = None,
    plan_json: str | None = None,
) -> str:
    """The plan a Ray context runs ``ds`` with when no optimizer plan decides."""
def plan_text(json: str) -> str: ...
def default_optimizer_options() -> str: ...

# Weighted interleave (crates/sluice-py/src/mix.rs).
def mix(datasets: list[Dataset], weights: list[float] | None, seed: int, stop: str) -> Dataset: ...

# Relational, blocking ops (crates/sluice-py/src/relational.rs); they run on first iteration.
def sort(
    ds: Dataset,
    by: list[str],
    descending: list[bool],
    memory_budget: int | None = None,
    spill_dir: str | None = None,
    seed: int = 0,
) -> Dataset: ...
def aggregate(
    ds: Dataset,
    keys: list[str],
    aggs: list[tuple[str, str, str | None]],
    memory_budget: int | None = None,
    spill_dir: str | None = None,
    seed: int = 0,
) -> Dataset: ...
def repartition(
    ds: Dataset,
    n: int,
    memory_budget: int | None = None,
    spill_dir: str | None = None,
    seed: int = 0,
) -> Dataset: ...

# Run-time hybrid placement, re-exported by sluice.placement (crates/sluice-py/src/placement.rs).
DEFAULT_REMOTE_CPU_PRICE: float
SCALE_REMOTE: str
STABLE: str

class Decision:
    """One placement change (``local``/``remote``: -1, 0 or +1) and why."""

    local: int
    remote: int
    state: str
    reason: str
    rate: float
    local_workers: int
    remote_actors: int
    cost_per_hour: float
    def __init__(
        self,
        local: int,
        remote: int,
        state: str,
        reason: str,
        rate: float,
        local_workers: int,
        remote_actors: int,
        cost_per_hour: float,
    ) -> None: ...
    def as_dict(self) -> dict[str, Any]: ...

class PlacementOptions:
    """The limits (widened to the starting counts), prices and thresholds of an AutoPlacement."""

    min_local: int
    max_local: int
    min_remote: int
    max_remote: int
    local_cpu_price: float
    remote_cpu_price: float
    actor_cpus: float
    target: float | None
    slack: float
    improve: float
    degrade: float
    patience: int

class AutoPlacement(PlacementOptions):
    """Pecan's AutoPlacement for one stage: ``observe(rate)`` once per measurement window."""

    def __init__(
        self,
        local: int,
        remote: int,
        min_local: int = 0,
        max_local: int = 0,
        min_remote: int = 0,
        max_remote: int = 1,
        local_cpu_price: float = 0.0,
        remote_cpu_price: float = ...,
        actor_cpus: float = 1.0,
        target: float | None = None,
        slack: float = 0.05,
        improve: float = 0.03,
        degrade: float = 0.10,
        patience: int = 2,
    ) -> None: ...
    def observe(self, rate: float) -> Decision | None: ...
    def cost_per_hour(self, local: int | None = None, remote: int | None = None) -> float: ...
    @property
    def cheap(self) -> str: ...
    @property
    def local(self) -> int: ...
    @property
    def remote(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def decisions(self) -> list[Decision]: ...
