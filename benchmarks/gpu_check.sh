#!/usr/bin/env bash
# The GPU checks of issue 40 (and the many-core curve of issue 39) as one prepared run, for a
# machine with an NVIDIA GPU (an H100 or H200 with 16 cores was the target): within 10 minutes
# from a copy of the working tree, it
#   1. records the machine (nvidia-smi, lscpu),
#   2. finds a Python whose torch sees CUDA (the machine's own, else a venv from the registries),
#   3. installs sluice: a wheel carried in dist/ (`make wheel` on the build machine; the device
#      tool's `carry: ["dist"]`), else the one that Python has, else builds the extension with
#      maturin (needs cargo); and the wheels carried in $GPU_CHECK_WHEELS (nvImageCodec and its
#      nvJPEG, for a machine that reaches no registry), else DALI and nvImageCodec from the
#      registries when they answer,
#   4. runs the GPU tests (test_device_normalize.py, test_pinned.py, test_device_decode.py and the torch adapter tests:
#      CUDA cases skip on a machine without one and run here),
#   5. runs benchmarks/gpu_feed.py: ResNet-50 bf16 channels_last fed by sluice float32, sluice
#      uint8 + normalise on the device (both the CPU decode path with the pinned ring), sluice
#      GPU decode (nvImageCodec and torchvision's nvJPEG), DataLoader + torchvision, DALI (when it
#      installs), and the model alone; then the 1..cores host-thread curves of the CPU path and
#      the GPU decode path,
#   6. runs benchmarks/scaling.py over 1..cores threads for the three reference workloads, when
#      $GPU_CHECK_BENCH_DATA names a tarball of (subsets of) the benchmark datasets' parts,
#      made with `benchmarks/gpu_carry.sh`.
# Everything it writes goes under $OUT (default ./gpu-check-out), eight files: log.txt,
# machine.txt, pytest.txt, gpu_feed.{md,json}, scaling.{md,json}, probe.txt (step 7:
# benchmarks/scaling_probe.py, the machine's own many-core ceiling and the CV stats). A step that cannot run says
# why in log.txt and the rest go on.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh            # on the GPU machine
#   GPU_CHECK_DEVICE=cpu bash benchmarks/gpu_check.sh    # a dry run of the same steps on a CPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
SECONDS_PER_ROW=${GPU_CHECK_SECONDS:-8}
WHEELS=${GPU_CHECK_WHEELS:-.devcarry/whl}
BENCH_DATA=${GPU_CHECK_BENCH_DATA:-.devcarry/bench-data.tgz}
# A GPU machine may reach no registry: pip would then spend minutes on retries for each name.
online() { timeout 6 python3 -c "import urllib.request as u; u.urlopen('https://pypi.org/simple/pip/', timeout=4)" >/dev/null 2>&1; }
ONLINE=0; online && ONLINE=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "gpu_check: $(date -u +%FT%TZ), device=$DEVICE, tree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
{ nvidia-smi 2>&1 || echo "no nvidia-smi"; lscpu; free -g; } > "$OUT/machine.txt"
grep -m1 "Model name" "$OUT/machine.txt" || true

# 2. Python with torch (and CUDA when asked for it).
want_cuda="import torch, sys; sys.exit(0 if ('$DEVICE' != 'cuda' or torch.cuda.is_available()) else 1)"
PY=""
for cand in "${GPU_CHECK_PYTHON:-}" .venv/bin/python python3 python; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && "$cand" -c "$want_cuda" 2>/dev/null && { PY=$cand; break; }
done
if [ -z "$PY" ] && [ "$ONLINE" = 1 ]; then
  echo "gpu_check: no Python with torch${DEVICE/cpu/} here; making .venv-gpu from the registries"
  python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -q --upgrade pip \
    && .venv-gpu/bin/pip install -q torch torchvision numpy pillow psutil pytest pytest-timeout cloudpickle "maturin>=1.5,<2" \
    && .venv-gpu/bin/python -c "$want_cuda" && PY=.venv-gpu/bin/python
fi
if [ -z "$PY" ]; then
  echo "gpu_check: FAILED: no torch that sees a CUDA device could be found or installed"; exit 1
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
for m in psutil PIL pytest pytest_timeout cloudpickle; do
  "$PY" -c "import $m" 2>/dev/null || { [ "$ONLINE" = 1 ] && "$PY" -m pip install -q "${m/PIL/pillow}"; } || echo "gpu_check: no $m here"
done

# 3. sluice: the carried wheel, else the one this Python has, else a build.
if ls dist/sluice_ml-*.whl >/dev/null 2>&1; then
  # Into a folder of its own, ahead on the path: the Python's own environment (a developer's
  # venv on a dry run) keeps the sluice it had.
  site=/tmp/sluice-gpu-check/site && rm -rf "$site" \
    && "$PY" -m pip install -q --no-deps --no-index --target "$site" dist/sluice_ml-*.whl \
    && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" && echo "gpu_check: installed $(ls dist/sluice_ml-*.whl)"
elif "$PY" -c "import sluice._native" 2>/dev/null; then
  echo "gpu_check: using the sluice this Python has"
elif command -v cargo >/dev/null; then
  "$PY" -m pip install -q "maturin>=1.5,<2" && VIRTUAL_ENV=$(dirname "$(dirname "$(command -v "$PY")")") \
    "$PY" -m maturin develop -q --release && echo "gpu_check: built the extension (release)"
else
  echo "gpu_check: FAILED: no wheel in dist/ and no cargo to build one (carry dist/ from 'make wheel')"; exit 1
fi
"$PY" -c "import sluice; print('sluice', sluice.__version__)" || exit 1

# Carried wheels (no registry needed), else DALI, the anchor, and nvImageCodec (the hardware
# JPEG decoder's driver; sluice's device decode prefers it) from the registries.
if [ "$DEVICE" = cuda ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl && echo "gpu_check: installed $(cd "$WHEELS" && ls *.whl)"
fi
if [ "$DEVICE" = cuda ] && [ "$ONLINE" = 1 ]; then
  if ! "$PY" -c "import nvidia.dali" 2>/dev/null; then
    for pkg in nvidia-dali-cuda130 nvidia-dali-cuda120; do
      timeout 150 "$PY" -m pip install -q "$pkg" 2>/dev/null && "$PY" -c "import nvidia.dali" 2>/dev/null && { echo "gpu_check: installed $pkg"; break; }
    done
  fi
  if ! "$PY" -c "from nvidia import nvimgcodec" 2>/dev/null; then
    cu=$("$PY" -c "import torch; print((torch.version.cuda or '12').split('.')[0])")
    timeout 150 "$PY" -m pip install -q "nvidia-nvimgcodec-cu$cu[nvjpeg]" 2>/dev/null \
      && "$PY" -c "from nvidia import nvimgcodec" 2>/dev/null && echo "gpu_check: installed nvidia-nvimgcodec-cu$cu"
  fi
fi
"$PY" -c "import nvidia.dali" 2>/dev/null || echo "gpu_check: no DALI here (offline: its wheel is too large to carry)"
"$PY" -c "from nvidia import nvimgcodec; print('gpu_check: nvImageCodec', nvimgcodec.__version__)" 2>&1 | tail -1

# 4. Tests: CUDA cases run here, the rest as on any machine.
timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/python/test_device_normalize.py tests/python/test_pinned.py \
  tests/python/test_device_decode.py tests/python/test_torch.py -k "normalize or iter_torch or pin or cuda or device" \
  > "$OUT/pytest.txt" 2>&1
echo "gpu_check: tests rc=$? ($(tail -1 "$OUT/pytest.txt"))"

# 5. The benchmark (the loaders + the thread curves, ~SECONDS_PER_ROW each).
cores=$(nproc)
curve=$(for t in 1 2 4 8 16 32 64; do [ "$t" -lt "$cores" ] && printf '%s,' "$t"; done)$cores
FEED_DATA=${GPU_CHECK_DATA:-/tmp/sluice-gpu-check/gpu-feed}
if [ "$DEVICE" = cpu ]; then
  args=(--device cpu --model resnet18 --batch 8 --seconds 2 --warmup 1 --images 200 --threads 1,$cores --workers 1)
else
  args=(--device cuda --seconds "$SECONDS_PER_ROW" --threads "$curve" --workers "$cores" --images 2000)
fi
timeout 330 "$PY" benchmarks/gpu_feed.py "${args[@]}" --data "$FEED_DATA" --out "$OUT"
echo "gpu_check: benchmark rc=$?; $(date -u +%FT%TZ)"

# 6. The many-core curve of the three reference workloads (issue 39) on the carried parts of the
# benchmark datasets (a subset of each, cycled; the images step 5 made where it holds none).
# Its logs stay out of $OUT (only 8 files come back).
if [ -f "$BENCH_DATA" ]; then
  bench=/tmp/sluice-gpu-check/bench && mkdir -p "$bench" && tar xzf "$BENCH_DATA" -C "$bench" --strip-components=1 \
    && { [ -d "$bench/images" ] || ln -sfn "$FEED_DATA" "$bench/images"; }
  if [ "$DEVICE" = cpu ]; then
    sargs=(--workers 1,$cores --budget 2 --samples cv=400,nlp=2560,asr=20)
  else
    sargs=(--workers "$(for t in 1 2 4 8 12; do [ "$t" -lt "$cores" ] && printf '%s,' "$t"; done)$cores" --budget 6
           --samples cv=200000,nlp=5000000,asr=100000)
  fi
  timeout 200 "$PY" benchmarks/scaling.py --workloads cv,nlp,asr --systems sluice_native --repeats 1 \
    "${sargs[@]}" --data "$bench" --out /tmp/sluice-gpu-check/scaling
  echo "gpu_check: scaling rc=$?"
  cp /tmp/sluice-gpu-check/scaling/scaling.md /tmp/sluice-gpu-check/scaling/scaling.json "$OUT"/ 2>/dev/null
  # 7. What binds the curve: the machine's own ceiling and the CV stats at half and all cores.
  if [ "$DEVICE" = cpu ]; then pargs=(--procs 1,$cores --seconds 0.5); else pargs=(--procs "$(for t in 1 2 4 8 12; do [ "$t" -lt "$cores" ] && printf '%s,' "$t"; done)$cores"); fi
  timeout 120 "$PY" benchmarks/scaling_probe.py "${pargs[@]}" --cv "$bench" > "$OUT/probe.txt" 2>&1
  echo "gpu_check: probe rc=$?"
else
  echo "gpu_check: no $BENCH_DATA: the many-core curve is skipped"
fi
echo "gpu_check: done $(date -u +%FT%TZ)"
