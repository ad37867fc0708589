"""Nothing left behind, nothing another local user can touch (issue 35): caches, spill
directories, shared-memory segments and part-file temporaries are private and go at exit,
and what a SIGKILLed run left is swept by the next one; planted names are never written
through; the metrics endpoint cannot be used to exhaust the trainer's file descriptors.

Each case runs real child processes with ``TMPDIR`` pointed at a fresh directory, so what a
run leaves there is exactly what this test sees."""

from __future__ import annotations

import glob
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import sluice
from sluice import metrics

TIMEOUT = 120  # seconds a child may take: a hang guard, never a speed assertion


class Child:
    """A Python child running ``code`` with ``TMPDIR=tmp``; talks over stdin/stdout lines."""

    def __init__(self, code: str, tmp, **env):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TMPDIR": str(tmp), **{k: str(v) for k, v in env.items()}},
        )

    def line(self) -> str:
        out: list[str] = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(TIMEOUT)
        if not out or not out[0]:
            self.proc.kill()
            raise AssertionError(f"child said nothing; stderr: {self.proc.stderr.read()[-3000:]}")
        return out[0].strip()

    def send(self, text: str = "") -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)

    def finish(self) -> str:
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, err[-3000:]
        return out


def tree(root) -> dict[str, int]:
    """Every path under ``root`` (not following links) with its permission bits."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            found[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
    return found


def assert_private(root) -> None:
    """Everything a run keeps in a shared temporary directory is behind 0700 directories
    and nothing there is readable by others."""
    for rel, mode in tree(root).items():
        full = os.path.join(root, rel)
        if os.path.isdir(full):
            assert mode == 0o700, f"{rel}: {mode:o}"
        else:
            assert "/" in rel, f"{rel}: a file directly in the shared directory"
            assert mode & 0o077 == 0 or stat.S_IMODE(os.lstat(os.path.dirname(full)).st_mode) == 0o700, rel


def run_then_wait(tmp, body: str, **env) -> Child:
    """A child that runs ``body``, says "ready" and waits for a line (then exits normally)."""
    return Child(body + "\nprint('ready', flush=True)\nimport sys\nsys.stdin.readline()\n", tmp, **env)


# -- 1. cache(disk_bytes>0) -----------------------------------------------------------

CACHE = """
import numpy as np, sluice
def f(s):
    return {"id": s["id"], "v": np.full(100, s["id"], dtype=np.float64)}
ds = sluice.range(300).map(f).cache(2000, disk_bytes=1 << 20)
for epoch in range(2):
    assert sum(1 for _ in ds) == 300
"""


def test_cache_disk_file_has_no_name_and_nothing_survives_exit_or_kill(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    c = run_then_wait(tmp, CACHE)
    assert c.line() == "ready"
    # Mid-run: the disk tier is open but unlinked; only 0700 directories are there.
    names = tree(tmp)
    assert not any("cache" in n for n in names), names
    assert_private(tmp)
    c.send()
    c.finish()
    assert tree(tmp) == {}, "a normal exit leaves nothing, the process directory included"

    killed = run_then_wait(tmp, CACHE)
    assert killed.line() == "ready"
    killed.kill()
    left = tree(tmp)
    assert left and not any("cache" in n for n in left), left  # an empty directory, no data
    later = Child(CACHE, tmp)
    later.finish()
    assert tree(tmp) == {}, "the next run removes the killed run's directory"


# -- 2. sort()/groupby() spill directories ---------------------------------------------

SPILL = """
import sluice
from sluice import agg
rows = [{"x": (i * 7919) % 1000, "k": i % 7, "pad": "p" * 50} for i in range(2000)]
keep = []
for spill_dir in (None, SPILL_DIR):
    s = sluice.from_items(rows).sort("x", memory_budget=4000, spill_dir=spill_dir)
    g = sluice.from_items(rows).groupby("k").aggregate(agg.sum("x"), memory_budget=2000, spill_dir=spill_dir)
    assert len(list(s)) == 2000 and len(list(g)) == 7
    keep += [s, g]  # alive when the script ends
"""


def spill_code(spill) -> str:
    return SPILL.replace("SPILL_DIR", repr(str(spill)))


def test_spill_directories_are_private_and_gone_at_exit_with_the_dataset_alive(tmp_path):
    tmp, spill = tmp_path / "tmp", tmp_path / "spill"
    tmp.mkdir()
    c = run_then_wait(tmp, spill_code(spill))
    assert c.line() == "ready"
    in_tmp, in_spill = tree(tmp), tree(spill)
    assert any("spill" in n for n in in_tmp), in_tmp
    assert in_spill and all(n.startswith("sluice-spill-") for n in in_spill), in_spill
    assert_private(tmp)
    for rel, mode in in_spill.items():
        if "/" not in rel:
            assert mode == 0o700, f"{rel}: {mode:o}"
    c.send()
    c.finish()
    assert tree(tmp) == {} and tree(spill) == {}


def test_spill_directories_of_a_killed_run_go_at_the_next_run(tmp_path):
    tmp, spill = tmp_path / "tmp", tmp_path / "spill"
    tmp.mkdir()
    c = run_then_wait(tmp, spill_code(spill))
    assert c.line() == "ready"
    c.kill()
    assert tree(spill) and tree(tmp), "SIGKILL runs no exit hook"
    Child(spill_code(spill), tmp).finish()
    assert tree(tmp) == {} and tree(spill) == {}


# -- 3. processes=N shared-memory segments ----------------------------------------------

SHM = "/dev/shm"
POOL = """
import numpy as np, sluice
def big(s):
    return {"id": s["id"], "x": np.full(1 << 17, s["id"], dtype=np.float64)}  # 1 MiB: shared memory
"""


def segments(pid: int) -> set[str]:
    return {n for n in os.listdir(SHM) if n.startswith(f"sluice-{pid}-")}


@pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm")
def test_segments_of_a_killed_trainer_are_swept_by_the_next_pool(tmp_path):
    psutil = pytest.importorskip("psutil")
    c = Child(POOL + """
import os, psutil
it = iter(sluice.range(10**6).map(big).iter(processes=2))
for _ in range(5):
    next(it)
print(os.getpid(), *[p.pid for p in psutil.Process().children()], flush=True)
for s in it:  # keeps segments in flight until killed
    pass
""", tmp_path)
    pid, *workers = map(int, c.line().split())
    c.kill()
    # The workers end when their pipe closes; one still finishing a chunk could write a
    # segment after the sweep below, so wait for them first.
    psutil.wait_procs([p for p in map(lambda w: psutil.Process(w) if psutil.pid_exists(w) else None, workers)
                       if p is not None], timeout=TIMEOUT)
    # Whatever was in flight stays until someone sweeps; plant one more under the dead pid
    # (as older versions named them) so the sweep has something to do on any machine.
    planted = os.path.join(SHM, f"sluice-{pid}-0-q999")
    with open(planted, "wb") as f:
        f.write(b"x" * 1000)
    try:
        Child(POOL + "assert len(list(sluice.range(8).map(big).iter(processes=2))) == 8\n", tmp_path).finish()
        assert segments(pid) == set()
    finally:
        if os.path.exists(planted):
            os.remove(planted)


@pytest.mark.skipif(not os.path.isdir(SHM), reason="no /dev/shm")
def test_squatted_segment_names_do_not_break_the_pool(tmp_path):
    # The child plants every name older versions would have used first (files, and links
    # to a file the trainer can write), then runs a pool with big inputs and outputs.
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = Child(POOL + f"""
import os
planted = []
for pool in range(3):
    for kind in ("q", "r"):
        for n in range(8):
            p = os.path.join({SHM!r}, f"sluice-{{os.getpid()}}-{{pool}}-{{kind}}{{n}}")
            if n % 2:
                os.symlink({str(victim)!r}, p)
            else:
                open(p, "w").close()
            planted.append(p)
try:
    items = [{{"id": i, "x": np.full(1 << 16, i, dtype=np.float64)}} for i in range(12)]
    got = list(sluice.from_items(items).map(big).iter(processes=2))
    assert [int(b["x"][0]) for b in got] == list(range(12))
    print("ok", flush=True)
finally:
    for p in planted:
        os.remove(p)
""", tmp_path).finish()
    assert "ok" in out
    assert victim.read_bytes() == b"precious"


# -- 4 and 6. write_parquet / write_jsonl temporaries -----------------------------------

WRITE = """
import time, sluice
def slow(s):
    time.sleep(0.002)
    return s
sluice.range({n}).map(slow).write_{fmt}({out!r}, rows_per_file=10**6, num_threads=1{extra})
"""


def write_code(n: int, fmt: str, out) -> str:
    # Parquet's temporary appears with its first row group.
    return WRITE.format(n=n, fmt=fmt, out=str(out), extra=", rows_per_group=50" if fmt == "parquet" else "")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_write_killed_midway_leaves_a_temporary_the_next_write_removes(tmp_path, fmt):
    out = tmp_path / "out"
    c = Child(write_code(10**6, fmt, out), tmp_path)
    deadline = time.time() + TIMEOUT
    while time.time() < deadline and not (out.is_dir() and any(".tmp-" in n for n in os.listdir(out))):
        time.sleep(0.02)
    c.kill()
    left = [n for n in os.listdir(out) if ".tmp-" in n]
    assert left and all(n.startswith(f".part-00000.{fmt}.tmp-{c.proc.pid}") for n in left), left
    Child(write_code(50, fmt, out), tmp_path).finish()
    assert sorted(os.listdir(out)) == [f"part-00000.{fmt}"]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_link_planted_at_the_old_temporary_name_is_not_written_through(tmp_path, fmt):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, out / f".part-00000.{fmt}.tmp-{os.getpid()}")
    files = getattr(sluice.range(20), f"write_{fmt}")(str(out))
    assert victim.read_bytes() == b"precious"
    assert [os.path.basename(f) for f in files] == [f"part-00000.{fmt}"]
    assert os.path.islink(out / f".part-00000.{fmt}.tmp-{os.getpid()}"), "someone else's link: left alone"


# -- 7. the metrics endpoint ------------------------------------------------------------

def idle_sockets(address, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(address)
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def closed_by_peer(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def metrics_threads() -> list[str]:
    """The endpoint's threads alive in this process: Rust's, so named at the OS level and
    read from /proc (a thread's name there is cut at 15 bytes: "sluice-metrics-")."""
    names = []
    for comm in glob.glob(f"/proc/{os.getpid()}/task/*/comm"):
        try:
            with open(comm) as f:
                name = f.read().strip()
        except OSError:  # it ended meanwhile
            continue
        if name.startswith("sluice-metrics"):
            names.append(name)
    return names


def no_metrics_threads() -> bool:
    """Whether the endpoint's threads are gone: joined ones may show in /proc a moment
    longer, so this looks again for a while (a hang guard, not a speed assertion)."""
    deadline = time.time() + 10
    while metrics_threads() and time.time() < deadline:
        time.sleep(0.02)
    return metrics_threads() == []


def test_idle_connections_are_capped_and_dropped_after_the_idle_timeout(monkeypatch):
    monkeypatch.setattr(metrics, "_IDLE_TIMEOUT", 0.5)
    monkeypatch.setattr(metrics, "_MAX_CONNECTIONS", 8)
    it = sluice.range(10**6).batch(10).iter(stats_port=0)
    next(it)
    live = it._live
    socks = idle_sockets(it.stats_address, 40)
    try:
        assert len(socks) >= 9 and live.connections() <= 8
        # Every one is closed by the server: at once beyond the cap, after the idle timeout
        # for the others (the wait is a hang guard, not a speed assertion).
        assert all(closed_by_peer(s, 30) for s in socks)
        deadline = time.time() + 30
        while live.connections() and time.time() < deadline:
            time.sleep(0.05)
        assert live.connections() == 0
        host, port = it.stats_address
        import urllib.request

        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as r:
            assert b"sluice_consumer_outputs_total 1" in r.read()
    finally:
        for s in socks:
            s.close()
        it.close()
    assert no_metrics_threads()


def test_close_ends_the_endpoint_and_the_threads_of_open_connections(monkeypatch):
    monkeypatch.setattr(metrics, "_IDLE_TIMEOUT", 600.0)  # only close() can end them here
    it = sluice.range(10**6).batch(10).iter(stats_port=0)
    next(it)
    live, address = it._live, it.stats_address
    held = idle_sockets(address, 3)
    deadline = time.time() + 30
    while live.connections() < 3 and time.time() < deadline:
        time.sleep(0.02)
    assert live.connections() == 3 and len(metrics_threads()) == 4  # the server and 3 handlers
    it.close()
    try:
        assert all(closed_by_peer(s, 30) for s in held)
    finally:
        for s in held:
            s.close()
    assert no_metrics_threads()
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=5).close()


def test_an_iterator_dropped_without_close_stops_its_endpoint():
    import gc

    it = sluice.range(10**6).batch(10).iter(stats_port=0)
    next(it)
    address = it.stats_address
    del it
    gc.collect()
    assert no_metrics_threads()  # the iterator's finalizer closed the endpoint
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=5).close()


def test_idle_connections_cannot_exhaust_the_trainers_file_descriptors(tmp_path):
    c = Child("""
import os, resource, sys, sluice
from sluice import metrics
metrics._IDLE_TIMEOUT = 600.0  # only the cap protects here
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
it = sluice.range(10**6).batch(10).iter(stats_port=0)
next(it)
print(it.stats_address[1], flush=True)
sys.stdin.readline()
files = [open(os.devnull) for _ in range(150)]  # the training loop's own files
for _ in range(100):
    next(it)
print("ok", it._live.connections(), flush=True)
it.close()
""", tmp_path)
    port = int(c.line())
    socks = idle_sockets(("127.0.0.1", port), 300)
    try:
        time.sleep(0.5)  # lets the server accept (or refuse) them: not a speed assertion
        c.send()
        out = c.finish()
    finally:
        for s in socks:
            s.close()
    ok, held = out.split()[-2:]
    assert ok == "ok" and int(held) <= metrics._MAX_CONNECTIONS, out


def test_a_taken_port_is_named_in_the_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(OSError, match=f"stats_port {port}.*in use"):
            sluice.range(10).iter(stats_port=port)
