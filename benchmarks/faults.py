"""Exactly-once under preemption: SIGKILL a training process mid-epoch, resume from its last
checkpoint, count what was lost or delivered twice.

A "trainer" child iterates a pipeline with random built-in ops and a Python UDF drawing from
its per-sample generator; after each batch it appends the batch's ids, a digest of the batch's
bytes and `it.state_dict()` to a log (one line, flushed and fsynced: what a trainer saving a
checkpoint per step does). The driver kills the child with SIGKILL after a random number of
batches (the child waits there, its pipeline's threads still running ahead, so a child on a
busy machine cannot finish the epoch before the driver has read its ticks), starts a new
child that loads the last complete checkpoint, kills that one too, and so on; the last child
runs to the end of the epoch. The batches logged by all children are
compared with an uninterrupted run: every sample exactly once, batch for batch byte-identical.

Elastic: two ranks run part of the epoch and are killed; their last checkpoints are merged
(`sluice.elastic_state`) and three new ranks finish the epoch.

Usage: python benchmarks/faults.py [--runs 3] [--kills 2] [--n 3000] [--seed 0] [--markdown]
Each row is one case; docs/RELIABILITY.md holds the table this prints.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pipeline(n: int, rank: int = 0, world: int = 1):
    import numpy as np

    import sluice
    import sluice.image as I

    def make(s, rng):
        return {"id": s["id"], "img": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)}

    return (
        sluice.range(n)
        .shuffle()
        # Unequal shards: an equal split leaves up to world-1 samples out by contract, and the
        # elastic case must show every sample.
        .shard(rank, world, equal=False)
        .map(make)
        .map(I.horizontal_flip(0.5, field="img"))
        .map(I.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8, field="img"))
        .filter(lambda s: s["id"] % 7 != 3)
        .batch(16)
    )


def digest(batch) -> str:
    h = hashlib.sha256()
    for key in sorted(batch):
        h.update(key.encode())
        h.update(batch[key].tobytes())
    return h.hexdigest()[:16]


def child(args: argparse.Namespace) -> None:
    """One trainer process: resume from `--state` if given, log every batch, print a tick."""
    ds = pipeline(args.n, args.rank, args.world)
    opts = {"seed": args.seed, "progress": False}
    opts.update({"processes": args.processes} if args.processes else {"num_threads": args.threads})
    it = ds.iter(**opts)
    if args.state:
        with open(args.state) as f:
            it.load_state_dict(json.load(f))
    with open(args.log, "a") as log:
        for n, batch in enumerate(it, 1):
            line = {"ids": batch["id"].tolist(), "digest": digest(batch), "state": it.state_dict()}
            log.write(json.dumps(line) + "\n")
            log.flush()
            os.fsync(log.fileno())
            print("b", flush=True)
            if n == args.stop_after:
                time.sleep(3600)  # the driver's SIGKILL ends it here


def start(case: dict, log: str, rank: int = 0, world: int = 1, state: str | None = None,
          stop_after: int | None = None):
    cmd = [sys.executable, __file__, "--child", "--log", log, "--n", str(case["n"])]
    cmd += ["--stop-after", str(stop_after or 0)]
    cmd += ["--seed", str(case["seed"]), "--rank", str(rank), "--world", str(world)]
    cmd += ["--threads", str(case.get("threads", 2)), "--processes", str(case.get("processes", 0))]
    if state:
        cmd += ["--state", state]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "python"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ticks: queue.Queue = queue.Queue()

    def pump():
        for _ in proc.stdout:
            ticks.put(1)
        ticks.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, ticks


def run_until(case: dict, log: str, batches: int | None, **kw) -> bool:
    """Runs a child until it logged `batches` more batches (then SIGKILL) or the end (None).
    Returns True if it was killed."""
    proc, ticks = start(case, log, stop_after=batches, **kw)
    seen = 0
    while batches is None or seen < batches:
        try:
            tick = ticks.get(timeout=120)
        except queue.Empty:
            proc.kill()
            raise RuntimeError("a trainer gave no batch for 120 s") from None
        if tick is None:
            break
        seen += 1
    if proc.poll() is None and batches is not None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return True
    proc.wait(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"trainer failed (rc {proc.returncode}): {proc.stderr.read()[-2000:]}")
    return False


def read_log(log: str) -> list[dict]:
    """The complete lines of a log (a kill may cut the last one short)."""
    out = []
    if not os.path.exists(log):
        return out
    with open(log) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return out


def last_state(log: str, tmp: str, name: str) -> str | None:
    lines = read_log(log)
    if not lines:
        return None
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(lines[-1]["state"], f)
    return path


def compare(expected: list[dict], got: list[dict]) -> dict:
    want = [i for b in expected for i in b["ids"]]
    have = [i for b in got for i in b["ids"]]
    counts: dict[int, int] = {}
    for i in have:
        counts[i] = counts.get(i, 0) + 1
    lost = sum(1 for i in set(want) if i not in counts)
    dup = sum(c - 1 for c in counts.values() if c > 1)
    identical = [b["digest"] for b in expected] == [b["digest"] for b in got]
    return {"samples": len(want), "delivered": len(have), "lost": lost, "duplicated": dup, "identical": identical}


def preempted(case: dict, kills: int, rng: random.Random, resume: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.jsonl")
        run_until(case, ref, None)
        expected = read_log(ref)
        log = os.path.join(tmp, "run.jsonl")
        done, killed = 0, 0
        for k in range(kills):
            left = len(expected) - done
            if left < 2:
                break
            at = rng.randint(1, max(1, left // 2))
            killed += run_until(case, log, at, state=last_state(log, tmp, f"s{k}.json"))
            done = len(read_log(log))
        # `resume=False` checks the check: restarting without the checkpoint must show up.
        state = last_state(log, tmp, "final.json") if resume else None
        run_until(case, log, None, state=state)
        return dict(compare(expected, read_log(log)), kills=killed)


def elastic(case: dict, rng: random.Random) -> dict:
    import sluice

    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.jsonl")
        run_until(case, ref, None)
        expected = read_log(ref)
        states, got = [], []
        for rank in (0, 1):
            log = os.path.join(tmp, f"old{rank}.jsonl")
            assert run_until(case, log, rng.randint(2, 20), rank=rank, world=2), "rank ended early"
            lines = read_log(log)
            got += lines
            states.append(lines[-1]["state"])
        merged = os.path.join(tmp, "merged.json")
        with open(merged, "w") as f:
            json.dump(sluice.elastic_state(states), f)
        for rank in (0, 1, 2):
            log = os.path.join(tmp, f"new{rank}.jsonl")
            run_until(case, log, None, rank=rank, world=3, state=merged)
            got += read_log(log)
        result = compare(expected, got)
        # Ranks interleave differently from one process: compare the samples, not the batches.
        result["identical"] = sorted(i for b in expected for i in b["ids"]) == sorted(i for b in got for i in b["ids"])
        return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--log")
    ap.add_argument("--state")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--stop-after", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--processes", type=int, default=0)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    rng = random.Random(args.seed)
    cases = [{"threads": t} for t in (0, 1, 2, 8)] + [{"processes": 2}]
    rows = []
    for case in cases:
        case = dict(case, n=args.n, seed=args.seed)
        label = f"processes={case['processes']}" if "processes" in case else f"num_threads={case['threads']}"
        for _ in range(args.runs):
            r = preempted(case, args.kills, rng)
            rows.append((f"SIGKILL ×{args.kills} mid-epoch, resume ({label})", r))
            print(rows[-1], file=sys.stderr, flush=True)
    for _ in range(args.runs):
        r = elastic(dict(n=args.n, seed=args.seed, threads=2), rng)
        rows.append(("2 ranks SIGKILLed, elastic resume on 3 ranks", r))
        print(rows[-1], file=sys.stderr, flush=True)
    if args.markdown:
        print("| case | kills | samples | delivered | lost | duplicated | byte-identical |")
        print("|---|---:|---:|---:|---:|---:|---|")
    for name, r in rows:
        if args.markdown:
            print(f"| {name} | {r.get('kills', 2)} | {r['samples']} | {r['delivered']} | {r['lost']} | {r['duplicated']} | {'yes' if r['identical'] else 'NO'} |")
        else:
            print(name, json.dumps(r))


if __name__ == "__main__":
    main()
