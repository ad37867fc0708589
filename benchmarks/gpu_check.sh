#!/usr/bin/env bash
# The GPU checks of issue 40 as one prepared run, for a machine with an NVIDIA GPU (an H100 or
# H200 with 16 cores was the target): within 10 minutes from a copy of the working tree, it
#   1. records the machine (nvidia-smi, lscpu),
#   2. finds a Python whose torch sees CUDA (the machine's own, else a venv from the registries),
#   3. installs sluice: a wheel carried in dist/ (`make wheel` on the build machine; the device
#      tool's `carry: ["dist"]`), else the one that Python has, else builds the extension with
#      maturin (needs cargo),
#   4. runs the GPU tests (test_device_normalize.py, test_pinned.py, test_device_decode.py and the torch adapter tests:
#      CUDA cases skip on a machine without one and run here),
#   5. runs benchmarks/gpu_feed.py: ResNet-50 bf16 channels_last fed by sluice float32, sluice
#      uint8 + normalise on the device (both the CPU decode path with the pinned ring), sluice
#      GPU decode (nvJPEG), DataLoader + torchvision, DALI (when it installs), and the model
#      alone; then the 1..cores host-thread curves of the CPU path and the GPU decode path.
# Everything it writes goes under $OUT (default ./gpu-check-out): log.txt, machine.txt,
# pytest.txt, gpu_feed.{md,json}. A step that cannot run says why in log.txt and the rest go on.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh            # on the GPU machine
#   GPU_CHECK_DEVICE=cpu bash benchmarks/gpu_check.sh    # a dry run of the same steps on a CPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
SECONDS_PER_ROW=${GPU_CHECK_SECONDS:-10}
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
if [ -z "$PY" ]; then
  echo "gpu_check: no Python with torch${DEVICE/cpu/} here; making .venv-gpu from the registries"
  python3 -m venv .venv-gpu && .venv-gpu/bin/pip install -q --upgrade pip \
    && .venv-gpu/bin/pip install -q torch torchvision numpy pillow psutil pytest pytest-timeout cloudpickle "maturin>=1.5,<2" \
    && .venv-gpu/bin/python -c "$want_cuda" && PY=.venv-gpu/bin/python
fi
if [ -z "$PY" ]; then
  echo "gpu_check: FAILED: no torch that sees a CUDA device could be found or installed"; exit 1
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
"$PY" -m pip install -q psutil pillow pytest pytest-timeout cloudpickle 2>/dev/null || true

# 3. sluice: the carried wheel, else the one this Python has, else a build.
if ls dist/sluice_ml-*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --force-reinstall --no-deps dist/sluice_ml-*.whl && echo "gpu_check: installed $(ls dist/sluice_ml-*.whl)"
elif "$PY" -c "import sluice._native" 2>/dev/null; then
  echo "gpu_check: using the sluice this Python has"
elif command -v cargo >/dev/null; then
  "$PY" -m pip install -q "maturin>=1.5,<2" && VIRTUAL_ENV=$(dirname "$(dirname "$(command -v "$PY")")") \
    "$PY" -m maturin develop -q --release && echo "gpu_check: built the extension (release)"
else
  echo "gpu_check: FAILED: no wheel in dist/ and no cargo to build one (carry dist/ from 'make wheel')"; exit 1
fi
"$PY" -c "import sluice; print('sluice', sluice.__version__)" || exit 1

# DALI, the anchor, if it installs from the registries (its wheels are on PyPI per CUDA major).
if [ "$DEVICE" = cuda ] && ! "$PY" -c "import nvidia.dali" 2>/dev/null; then
  for pkg in nvidia-dali-cuda130 nvidia-dali-cuda120; do
    timeout 150 "$PY" -m pip install -q "$pkg" 2>/dev/null && "$PY" -c "import nvidia.dali" 2>/dev/null && { echo "gpu_check: installed $pkg"; break; }
  done
fi

# nvImageCodec (the hardware JPEG decoder's driver; sluice's device decode prefers it).
if [ "$DEVICE" = cuda ] && ! "$PY" -c "from nvidia import nvimgcodec" 2>/dev/null; then
  cu=$("$PY" -c "import torch; print((torch.version.cuda or '12').split('.')[0])")
  timeout 150 "$PY" -m pip install -q "nvidia-nvimgcodec-cu$cu[nvjpeg]" 2>/dev/null \
    && "$PY" -c "from nvidia import nvimgcodec" 2>/dev/null && echo "gpu_check: installed nvidia-nvimgcodec-cu$cu"
fi

# 4. Tests: CUDA cases run here, the rest as on any machine.
timeout 240 "$PY" -m pytest -q -p no:cacheprovider tests/python/test_device_normalize.py tests/python/test_pinned.py \
  tests/python/test_device_decode.py tests/python/test_torch.py -k "normalize or iter_torch or pin or cuda or device" \
  > "$OUT/pytest.txt" 2>&1
echo "gpu_check: tests rc=$? ($(tail -1 "$OUT/pytest.txt"))"

# 5. The benchmark (4 loaders + the thread curve, ~SECONDS_PER_ROW each).
cores=$(nproc)
curve=$(for t in 1 2 4 8 16 32 64; do [ "$t" -lt "$cores" ] && printf '%s,' "$t"; done)$cores
if [ "$DEVICE" = cpu ]; then
  args=(--device cpu --model resnet18 --batch 8 --seconds 2 --warmup 1 --images 200 --threads 1,$cores --workers 1)
else
  args=(--device cuda --seconds "$SECONDS_PER_ROW" --threads "$curve" --workers "$cores")
fi
timeout 420 "$PY" benchmarks/gpu_feed.py "${args[@]}" --out "$OUT"
echo "gpu_check: benchmark rc=$?; done $(date -u +%FT%TZ)"
