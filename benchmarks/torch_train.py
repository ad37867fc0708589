"""ResNet-18 training steps/s fed by each loader: the CV reference pipeline (SimCLR
augmentations, 224 px, batch 64) through ``ds.iter_torch_batches()``, through
``DataLoader(ds.to_torch(), batch_size=None)``, and the PyTorch DataLoader + torchvision peer
(``benchmarks/peers/torch_dataloader.py``, 2 worker processes).

Each system trains a fresh ResNet-18 (SGD) for a window of at least ``--seconds`` after
``--warmup`` steps, in its own process, rounds interleaved; reported: steps/s, the seconds per
step the loop waited for its batch, and the CPU seconds the whole process tree spent per step
(model + loader). The first row trains on one batch over and over: the model alone, the
ceiling. On a machine without an accelerator the model trains on the same cores the loader
uses: a loader that keeps the model busy at less CPU leaves more of it to the model.

    .venv/bin/python benchmarks/torch_train.py [--data ~/.cache/sluice-bench] [--rounds 2]
        [--seconds 40] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers.common import tree_cpu_seconds  # noqa: E402
SYSTEMS = ("no loader (one batch, reused)", "sluice iter_torch_batches", "sluice to_torch + DataLoader",
           "DataLoader + torchvision (2 workers)")


def batches(system: str, data: Path):
    import sluice

    sys.path.insert(0, str(HERE))
    from peers import sluice_native, torch_dataloader

    if system == SYSTEMS[0]:
        import itertools

        first = next(sluice_native._cv(sluice, data, None, 0).iter_torch_batches())
        return itertools.repeat(first)
    if system == SYSTEMS[1]:
        ds = sluice_native._cv(sluice, data, None, 0).repeat()
        return ds.iter_torch_batches()
    if system == SYSTEMS[2]:
        import torch.utils.data as tud

        ds = sluice_native._cv(sluice, data, None, 0).repeat()
        return iter(tud.DataLoader(ds.to_torch(), batch_size=None, num_workers=0))
    return torch_dataloader.make_iter("cv", data, samples=10**7, workers=2)


def child(system: str, data: Path, warmup: int, seconds: float) -> dict:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cpu = tree_cpu_seconds

    it = batches(system, data)
    steps = waited = 0.0
    t0 = c0 = None
    n = 0
    while True:
        w = time.perf_counter()
        b = next(it)
        got = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(b["image"]), b["label"] % 10).backward()
        opt.step()
        n += 1
        if n == warmup:
            t0, c0, waited, steps = time.perf_counter(), cpu(), 0.0, 0
            continue
        if t0 is not None:
            waited += got - w
            steps += 1
            if time.perf_counter() - t0 >= seconds:
                break
    elapsed, spent = time.perf_counter() - t0, cpu() - c0
    return {"steps_per_s": steps / elapsed, "wait_s_per_step": waited / steps, "cpu_s_per_step": spent / steps,
            "steps": steps}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "sluice-bench")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.data, a.warmup, a.seconds)))
        return 0
    runs: dict = {s: [] for s in SYSTEMS}
    for r in range(a.rounds):
        for s in SYSTEMS:
            cmd = [sys.executable, __file__, "--child", s, "--data", str(a.data), "--seconds", str(a.seconds),
                   "--warmup", str(a.warmup)]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds * 6 + 600)
            if out.returncode:
                sys.stderr.write(out.stderr)
                return 1
            res = json.loads(out.stdout.strip().splitlines()[-1])
            runs[s].append(res)
            print(f"round {r + 1} {s}: {res}", file=sys.stderr)
    cpu_name = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    rows = []
    for s in SYSTEMS:
        med = {k: statistics.median(x[k] for x in runs[s]) for k in ("steps_per_s", "wait_s_per_step", "cpu_s_per_step")}
        rows.append((s, med))
    base = rows[-1][1]["steps_per_s"]
    if a.markdown:
        print(f"ResNet-18 training on the CV reference pipeline (224 px, batch 64), {os.cpu_count()} cores "
              f"({cpu_name}), no accelerator, medians of {a.rounds} interleaved rounds, ≥ {a.seconds:.0f} s each:\n")
        model_cpu = rows[0][1]["cpu_s_per_step"]
        print("| loader | steps/s | vs DataLoader | waiting for data, s/step | CPU s/step (model + loader) "
              "| loader's CPU s/step (over the model alone) |")
        print("|---|---:|---:|---:|---:|---:|")
        for s, m in rows:
            print(f"| {s} | {m['steps_per_s']:.3f} | {m['steps_per_s'] / base:.2f}× | {m['wait_s_per_step']:.2f} "
                  f"| {m['cpu_s_per_step']:.2f} | {m['cpu_s_per_step'] - model_cpu:+.2f} |")
    else:
        print(json.dumps({s: m for s, m in rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
