"""Bad input and failures: clear errors naming the sample and the op, at the right time."""

import pytest

import sluice
from procs import run_py


def test_udf_exception_names_sample_and_op_and_chains_cause():
    def explode(s):
        if s["id"] == 13:
            raise ValueError("bad thing")
        return s

    with pytest.raises(sluice.PipelineError) as ei:
        list(sluice.range(50).map(explode).batch(4))
    msg = str(ei.value)
    assert "explode" in msg and "sample 13" in msg and "bad thing" in msg
    assert isinstance(ei.value.__cause__, ValueError)


def test_error_names_path(images_dir):
    def fail(s):
        raise RuntimeError("nope")

    with pytest.raises(sluice.PipelineError, match=r"\.jpg"):
        list(sluice.read_images(str(images_dir)).map(fail))


def test_on_error_skip_counts():
    def flaky(s):
        if s["id"] % 10 == 0:
            raise ValueError("x")
        return s

    ds = sluice.range(100).map(flaky, on_error="skip")
    assert len(list(ds)) == 90
    assert sum(st["skipped"] for st in ds.stats().stages) == 10


def test_missing_files_fail_before_iteration(tmp_path):
    with pytest.raises(FileNotFoundError):
        sluice.read_files(str(tmp_path / "nope.bin"))
    with pytest.raises(FileNotFoundError):
        sluice.read_images(str(tmp_path / "*.jpg"))
    with pytest.raises(FileNotFoundError):
        sluice.read_text([str(tmp_path / "missing.txt")])


def test_missing_field_is_key_error():
    with pytest.raises(KeyError, match="'nope'.*select"):
        sluice.range(3).map(sluice.ops.select(["nope"]))
    # Unknown schema (after a UDF): detected per sample, still a KeyError naming op and field.
    with pytest.raises(KeyError, match="nope"):
        list(sluice.range(3).map(lambda s: s).map(sluice.ops.select(["nope"])))


@pytest.mark.parametrize(
    "build, exc",
    [
        (lambda: sluice.range(3).batch(0), ValueError),
        (lambda: sluice.range(3).batch(-1), ValueError),
        (lambda: sluice.range(3).batch(2.5), TypeError),
        (lambda: sluice.range(3).shard(3, 2), ValueError),
        (lambda: sluice.range(3).shuffle_buffer(0), ValueError),
        (lambda: sluice.range(3).prefetch(0), ValueError),
        (lambda: sluice.range(3).repeat(0), ValueError),
        (lambda: sluice.range(-1), ValueError),
        (lambda: sluice.range(3).map(42), TypeError),
        (lambda: sluice.range(3).map(lambda s: s, on_error="ignore"), ValueError),
        (lambda: sluice.range(3).map(lambda s: s, bogus=1), TypeError),
        (lambda: sluice.range(3).filter(lambda s: True).shuffle(), ValueError),
        (lambda: sluice.read_images("x", labels="folder"), ValueError),
        (lambda: sluice.range(3).iter(num_threads=-1), ValueError),
    ],
)
def test_invalid_arguments_fail_at_build_time(build, exc):
    with pytest.raises(exc):
        build()


def test_map_must_return_dict():
    with pytest.raises(TypeError, match="sample 0: .*must be a dict"):
        list(sluice.range(2).map(lambda s: 3))


def test_unsupported_values():
    with pytest.raises(TypeError):
        sluice.from_items([{"a": object()}])


def test_early_break_does_not_hang():
    r = run_py(
        """
        import sluice, time
        def slow(s):
            time.sleep(0.001)
            return s
        ds = sluice.range(10**9).map(slow).batch(8)
        for i, b in enumerate(ds):
            if i == 3:
                break
        ds2 = sluice.range(10**9).map(sluice.ops.noop())
        it = iter(ds2)
        next(it)
        del it
        print("ok")
        """
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_exit_with_live_iterator_does_not_hang():
    r = run_py(
        """
        import sluice
        it = iter(sluice.range(10**9).map(lambda s: s).batch(4))
        next(it)
        print("ok")
        """
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_keyboard_interrupt_reaches_consumer():
    r = run_py(
        """
        import signal, threading, time, sluice
        def slow(s):
            time.sleep(0.05)
            return s
        threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGINT)).start()
        try:
            for _ in sluice.range(10**6).map(slow).batch(10**5):
                pass
        except KeyboardInterrupt:
            print("interrupted")
        """
    )
    assert "interrupted" in r.stdout, r.stderr


def test_keyboard_interrupt_in_a_udf_is_never_skipped_or_wrapped():
    # Raised inside the function (as Ctrl-C does) with on_error="skip": the run stops with
    # the KeyboardInterrupt itself, not a PipelineError and not a counted skip.
    def udf(s):
        if s["id"] == 5:
            raise KeyboardInterrupt
        return s

    for threads in (0, 1, 2):
        with pytest.raises(KeyboardInterrupt):
            list(sluice.range(100).map(udf, on_error="skip").iter(num_threads=threads))


def test_keyboard_interrupt_stops_a_blocking_sort_while_it_reads():
    # The sort runs its whole input when the iteration starts (~10 s of UDF here): Ctrl-C
    # must stop it there, not after it.
    r = run_py(
        """
        import signal, threading, time, sluice
        def slow(s):
            time.sleep(0.001)
            return {"k": -s["id"]}
        threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGINT)).start()
        t0 = time.time()
        try:
            next(iter(sluice.range(10_000).map(slow).sort("k")))
        except KeyboardInterrupt:
            print("interrupted after", round(time.time() - t0, 1))
        """,
        timeout=60,
    )
    assert "interrupted after" in r.stdout, (r.stdout, r.stderr)
    assert float(r.stdout.split()[-1]) < 5, r.stdout


LONG_CALL = """
import signal, sys, tempfile, threading, time, sluice
def slow(s):
    time.sleep(0.01)
    return s
# ~10 minutes of work at num_threads=2 (120,000 calls of 10 ms) in one native call.
ds = sluice.range(120_000)
calls = {{
    "write_parquet": lambda: ds.map(slow).write_parquet(tempfile.mkdtemp(), num_threads=2),
    "write_jsonl": lambda: ds.map(slow).write_jsonl(tempfile.mkdtemp(), num_threads=2),
    "count": lambda: ds.filter(lambda s: slow(s) is not None).count(num_threads=2),
    # Small batches: the interrupt comes while the Arrow consumer pulls a later one.
    "to_arrow": lambda: ds.map(slow).to_arrow(num_threads=2, batch_rows=20),
}}
threading.Timer(1.0, lambda: signal.raise_signal(signal.SIGINT)).start()
t0 = time.monotonic()
try:
    calls["{call}"]()
except KeyboardInterrupt:
    print("KeyboardInterrupt after", round(time.monotonic() - t0, 1), flush=True)
except Exception as e:  # the Arrow C stream carries a message, not the exception
    print(type(e).__name__, "after", round(time.monotonic() - t0, 1), e, flush=True)
else:
    print("ran to the end", flush=True)
"""


@pytest.mark.parametrize("call", ["write_parquet", "write_jsonl", "count", "to_arrow"])
def test_ctrl_c_stops_a_long_native_call(call):
    # The sinks and to_arrow ran the whole pipeline with the GIL released and no signal
    # check: the Ctrl-C was seen once the call ended (here ~10 minutes). count() stopped, but
    # the interpreter then exited while a worker was still in `slow` and aborted (SIGABRT).
    # Now each call raises promptly and exit waits for the calls the stopped run finishes.
    r = run_py(LONG_CALL.format(call=call), timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    out = r.stdout.split()
    assert "after" in out, (r.stdout, r.stderr[-2000:])
    if call == "to_arrow":
        assert "KeyboardInterrupt" in r.stdout, r.stdout
    else:
        assert out[0] == "KeyboardInterrupt", r.stdout
    assert float(out[out.index("after") + 1]) < 20, r.stdout


def test_worker_error_shuts_down_cleanly():
    r = run_py(
        """
        import sluice, threading
        def bad(s):
            raise ValueError("x")
        try:
            list(sluice.range(10**6).map(bad))
        except sluice.PipelineError:
            pass
        import time; time.sleep(0.3)
        print("threads", threading.active_count())
        """
    )
    assert "threads 1" in r.stdout, r.stdout + r.stderr


def _until_error(it):
    """The outputs before the error, and the error (None if the run ended)."""
    got = []
    try:
        for x in it:
            got.append(x)
    except sluice.PipelineError as e:
        # Nothing after the error.
        assert list(it) == []
        return got, e
    return got, None


def _boom_at(n):
    def boom(s):
        if s["id"] == n:
            raise ValueError(f"boom {n}")
        return s

    return boom


@pytest.mark.parametrize("threads", [0, 1, 2, 4])
def test_every_sample_before_a_failing_one_is_delivered(threads):
    # It used to depend on where chunks ended: 16 at num_threads=0, 32 with threads.
    got, err = _until_error(sluice.range(1000).map(_boom_at(37)).iter(num_threads=threads))
    assert [s["id"] for s in got] == list(range(37))
    assert "sample 37" in str(err) and "boom 37" in str(err)

    evens = sluice.range(1000).filter(lambda s: s["id"] % 2 == 0).map(_boom_at(36))
    got, err = _until_error(evens.iter(num_threads=threads))
    assert [s["id"] for s in got] == list(range(0, 36, 2)) and err is not None

    doubled = sluice.range(1000).flat_map(lambda s: [s, s]).map(_boom_at(37))
    got, err = _until_error(doubled.iter(num_threads=threads))
    assert [s["id"] for s in got] == [i for i in range(37) for _ in (0, 1)] and err is not None


@pytest.mark.parametrize("threads", [0, 1, 2, 4])
def test_batches_before_a_failing_sample_are_delivered_not_the_one_holding_it(threads):
    got, err = _until_error(sluice.range(1000).map(_boom_at(37)).batch(8).iter(num_threads=threads))
    assert [b["id"].tolist() for b in got] == [list(range(i, i + 8)) for i in (0, 8, 16, 24)]
    assert "sample 37" in str(err)



CTRL_C = """
import os, signal, sys, threading, time, sluice
threads, close = {threads}, {close}
started = []
busy = threading.Event()
def slow(s):
    started.append(time.monotonic())
    if len(started) >= max(threads, 1):
        busy.set()
    time.sleep(4)
    return s
sent = []
def interrupt():
    busy.wait(30)  # every worker is inside a 4 s call
    # (time.sleep does not look at a signal that came just before it started)
    time.sleep(0.3)
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt, daemon=True).start()
it = sluice.range(100).map(slow).iter(num_threads=threads)
try:
    for _ in it:
        pass
except KeyboardInterrupt:
    print("latency", round(time.monotonic() - sent[0], 3), flush=True)
if close:
    it.close()  # waits for the workers to finish the call they are in
    print("late calls", sum(t > sent[0] for t in started), flush=True)
"""


@pytest.mark.parametrize("threads,close", [(0, True), (1, True), (2, True), (2, False)])
def test_ctrl_c_reaches_the_consumer_while_workers_run_long_calls(threads, close):
    # It took 10 s (the close timeout) with workers in 5 s calls: the consumer waited for
    # them and they went on with their chunk. Now the interrupt is raised at once; the
    # workers finish their call, start no other, and the interpreter exits cleanly (it
    # waits for those calls: a worker still in Python when it finalizes aborts the process).
    r = run_py(CTRL_C.format(threads=threads, close=close), timeout=60)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    latency = float(r.stdout.split("latency")[1].split()[0])
    assert latency < 2, r.stdout
    if close:
        assert "late calls 0" in r.stdout, r.stdout

def test_a_process_pool_delivers_every_sample_before_a_failing_one():
    # The pool returns a failed chunk whole; the items before the failure are run again.
    got, err = _until_error(sluice.range(1000).map(_boom_at(37)).iter(processes=2))
    assert [s["id"] for s in got] == list(range(37))
    assert "sample 37" in str(err) and "boom 37" in str(err)
    got, err = _until_error(sluice.range(1000).map(_boom_at(37)).batch(8).iter(processes=2))
    assert [b["id"].tolist() for b in got] == [list(range(i, i + 8)) for i in (0, 8, 16, 24)]
