"""Feed the GPU (issue 40): ResNet-50 training steps (bf16 autocast, channels_last) fed by each
loader, against the model alone — images/s, the share of the time the GPU waited for data, and
the host CPU each image cost — and the 1..N-thread curve of sluice's CPU path.

Loaders (each in a fresh process, a window of ``--seconds`` after ``--warmup`` steps):

* ``model alone``: one batch on the device, reused — the ceiling;
* ``sluice float32``: decode → random_resized_crop(224) → flip → normalize on the host,
  ``iter_torch_batches(device, pin_memory=True, decode_on_device=False)`` — batches written
  straight into the engine's page-locked ring;
* ``sluice uint8 + device normalize``: the same stopped before ``normalize``,
  ``iter_torch_batches(device, pin_memory=True, normalize=(mean, std), decode_on_device=False)``
  — a quarter of the bytes over PCIe;
* ``sluice GPU decode``: the same with ``decode_on_device=True``: the host reads the files and
  draws the crops, nvJPEG decodes (through nvImageCodec where it is installed: the hardware
  decoder) and the device crops, flips and normalises; ``(torchvision nvJPEG)``: the same with
  torchvision's ``decode_jpeg`` (the row is run only where nvImageCodec took the one above);
* ``DALI``: ``fn.decoders.image_random_crop(device="mixed")`` → resize → crop_mirror_normalize,
  when ``nvidia.dali`` imports (gpu_check.sh tries to install it);
* ``DataLoader + torchvision``: ``ImageFolder`` with RandomResizedCrop, flip, ToTensor,
  Normalize, ``num_workers`` processes, ``pin_memory=True``.

The images are made from the committed fixture photos (random crops and sizes, JPEG quality
90, ``--images`` of them): nothing is downloaded. ``--device cpu --model resnet18 --batch 16``
checks the script on a machine without a GPU (what ``benchmarks/gpu_check.sh`` does first).

    python benchmarks/gpu_feed.py [--device cuda] [--seconds 20] [--threads 1,2,4,8,16] [--out DIR]

Writes DIR/gpu_feed.{json,md}.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers.common import cpu_model, tree_cpu_seconds  # noqa: E402
ROOT = HERE.parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LOADERS = ("model alone", "sluice float32", "sluice uint8 + device normalize", "DataLoader + torchvision",
           "sluice GPU decode", "DALI", "sluice GPU decode (torchvision nvJPEG)")


def _make_image(job: tuple) -> None:
    """Image i of make_images, drawn from its own seed (so the set is the same in any order)."""
    root, i, photos = job
    import numpy as np
    from PIL import Image

    im = Image.open(photos[i % len(photos)]).convert("RGB")
    rng = np.random.default_rng(i)
    w, h = im.size
    cw, ch = int(w * rng.uniform(0.5, 1.0)), int(h * rng.uniform(0.5, 1.0))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    side = int(rng.integers(300, 600))
    out = im.crop((x, y, x + cw, y + ch)).resize((side, int(side * ch / cw)))
    d = Path(root) / f"class{i % 10}"
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=90)
    (d / f"{i:06d}.jpg").write_bytes(buf.getvalue())


def make_images(root: Path, n: int) -> Path:
    """n JPEGs in 10 class folders, cut from the fixture photos at random sizes (made once, on
    every core: a GPU machine's minutes are few)."""
    from multiprocessing import Pool

    done = root / f".done-{n}"
    if done.exists():
        return root
    photos = [str(p) for p in sorted((ROOT / "examples/fixtures/images").rglob("*.jpg"))]
    with Pool(os.cpu_count() or 1) as pool:
        pool.map(_make_image, [(str(root), i, photos) for i in range(n)], chunksize=16)
    done.touch()
    return root


def batches(loader: str, data: Path, device, batch: int, threads: int, workers: int):
    import itertools

    import sluice
    import sluice.image as I
    import torch

    def sluice_cv(normalize: bool):
        ds = (sluice.read_images(str(data), labels="parent_dir").shuffle(seed=0).repeat()
              .map(I.decode()).map(I.random_resized_crop(224)).map(I.horizontal_flip(0.5)))
        if normalize:
            ds = ds.map(I.normalize(MEAN, STD))
        return ds.map(sluice.ops.select(["image", "label"])).batch(batch, drop_last=True)

    cuda = device.type == "cuda"
    if loader == LOADERS[0]:
        b = next(sluice_cv(True).iter_torch_batches(device=device))
        return itertools.repeat(b)
    if loader == LOADERS[1]:
        return sluice_cv(True).iter_torch_batches(device=device, pin_memory=cuda, num_threads=threads,
                                                  decode_on_device=False)
    if loader in (LOADERS[2], LOADERS[4], LOADERS[6]):
        if loader == LOADERS[6]:
            sys.modules["nvidia.nvimgcodec"] = None  # type: ignore[assignment]  # torchvision decodes
        return sluice_cv(False).iter_torch_batches(device=device, pin_memory=cuda, num_threads=threads,
                                                   normalize=(MEAN, STD), decode_on_device=loader != LOADERS[2])
    if loader == LOADERS[5]:
        return dali(data, batch, threads)
    import torchvision
    import torchvision.transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    folder = torchvision.datasets.ImageFolder(str(data), transform=tf)
    dl = torch.utils.data.DataLoader(folder, batch_size=batch, shuffle=True, num_workers=workers,
                                     pin_memory=cuda, drop_last=True, persistent_workers=workers > 0)

    def forever():
        while True:
            for x, y in dl:
                yield {"image": x.to(device, non_blocking=True), "label": y.to(device, non_blocking=True)}

    return forever()


def dali(data: Path, batch: int, threads: int):
    """DALI's own ImageNet-style pipeline: the file reader, the mixed (nvJPEG, hardware where
    there is one) decoder fused with the random crop, resize, mirror and normalise on the GPU."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(data), random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    p = pipe()
    p.build()
    it = DALIGenericIterator(p, ["image", "label"], reader_name="Reader", auto_reset=True)

    def forever():
        while True:
            for b in it:
                yield {"image": b[0]["image"], "label": b[0]["label"].squeeze(-1).long()}

    return forever()


def child(a: argparse.Namespace) -> dict:
    import torch
    import torchvision

    device = torch.device(a.device)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(num_classes=10).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cpu = tree_cpu_seconds

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    it = batches(a.child, Path(a.data), device, a.batch, a.threads, a.workers)
    n = steps = 0
    waited = 0.0
    t0 = c0 = None
    while True:
        w = time.perf_counter()
        b = next(it)
        got = time.perf_counter()
        x = b["image"].to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = b["label"].to(device, non_blocking=True) % 10
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        n += 1
        if n == a.warmup:
            sync()
            t0, c0, waited, steps = time.perf_counter(), cpu(), 0.0, 0
            continue
        if t0 is not None:
            waited += got - w
            steps += 1
            if time.perf_counter() - t0 >= a.seconds:
                sync()
                break
    elapsed, spent = time.perf_counter() - t0, cpu() - c0
    images = steps * a.batch
    out = {"images_per_s": images / elapsed, "wait_share": waited / elapsed, "cpu_s_per_image": spent / images,
           "steps": steps}
    if a.child.startswith("sluice"):
        from sluice import _native

        # Batches written straight into page-locked buffers: how many were locked, and failures.
        out["pinned"] = _native.pin_stats()
    return out


def dali_installed() -> bool:
    return subprocess.run([sys.executable, "-c", "import nvidia.dali"], capture_output=True).returncode == 0


def nvimgcodec_installed() -> bool:
    return subprocess.run([sys.executable, "-c", "from nvidia import nvimgcodec"], capture_output=True).returncode == 0


def run_child(a: argparse.Namespace, loader: str, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--child", loader, "--threads", str(threads)]
    for k in ("device", "model", "batch", "seconds", "warmup", "workers", "data"):
        cmd += [f"--{k}", str(getattr(a, k))]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds * 4 + 90)
    except subprocess.TimeoutExpired as e:
        return {"error": f"{(e.stderr or b'')[-1200:]!r}\nno result in {e.timeout:.0f} s"}
    if out.returncode:
        return {"error": out.stderr[-1500:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", default=str(os.cpu_count() or 1),
                    help="sluice threads for the loader rows; a comma list adds the curve (uint8 path)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="DataLoader worker processes")
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--data", default=str(Path.home() / ".cache/sluice-bench/gpu-feed"))
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--loaders", default=None,
                    help="only these rows (comma list of their numbers: 0 model alone .. 6, as LOADERS)")
    ap.add_argument("--curves", default="2,4", help="the loaders whose thread curve is run (numbers)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        a.threads = int(a.threads)
        print(json.dumps(child(a)))
        return 0
    make_images(Path(a.data), a.images)
    curve = [int(t) for t in a.threads.split(",")]
    top = max(curve)
    rows: list = []

    def add(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        report(a, rows)  # after every row: a run cut short still leaves what it measured

    picked = LOADERS if a.loaders is None else [LOADERS[int(i)] for i in a.loaders.split(",")]
    for loader in picked:
        if loader == "DALI" and not dali_installed():
            add({"loader": loader, "threads": top, "error": "nvidia.dali does not import here"})
            continue
        if loader.startswith("sluice GPU decode") and a.device != "cuda":
            continue
        if loader == LOADERS[6] and not nvimgcodec_installed():
            continue  # the row above already decoded with torchvision
        add({"loader": loader, "threads": top, **run_child(a, loader, top)})
    # The host threads each path needs: the CPU path's curve, and the GPU decode's.
    for loader in [LOADERS[int(i)] for i in a.curves.split(",") if i]:
        if loader.startswith("sluice GPU decode") and a.device != "cuda":
            continue
        for t in curve[:-1] if len(curve) > 1 else []:
            add({"loader": f"{loader} (curve)", "threads": t, **run_child(a, loader, t)})
    print((a.out / "gpu_feed.md").read_text())
    return 0


def report(a: argparse.Namespace, rows: list) -> None:
    """DIR/gpu_feed.{md,json} for the rows so far."""
    dev = a.device
    if a.device == "cuda":
        import torch

        dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else a.device
    cpu = cpu_model()
    ceiling = next((r.get("images_per_s") for r in rows if r["loader"] == LOADERS[0]), None)
    lines = [f"{a.model}, batch {a.batch}, bf16 autocast, channels_last; device: {dev}; host: {cpu}, "
             f"{os.cpu_count()} cores; ≥ {a.seconds:.0f} s per row", "",
             "| loader | threads | images/s | vs model alone | waiting for data | host CPU ms/image |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['loader']} | {r['threads']} | failed: {r['error'].splitlines()[-1][:80]} | | | |")
            continue
        vs = f"{r['images_per_s'] / ceiling:.2f}×" if ceiling else "-"
        lines.append(f"| {r['loader']} | {r['threads']} | {r['images_per_s']:,.0f} | {vs} "
                     f"| {r['wait_share']:.0%} | {r['cpu_s_per_image'] * 1e3:.2f} |")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gpu_feed.md").write_text("\n".join(lines) + "\n")
    (a.out / "gpu_feed.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    sys.exit(main())
