#!/usr/bin/env bash
# Create the benchmark venv (.venv-bench at the repo root) with the peer systems, and the
# Debian tools the dataset builder needs (espeak-ng, lame).
#
#   benchmarks/setup.sh            # venv + apt tools
#   benchmarks/setup.sh --data     # ... then build the datasets (benchmarks/datasets/build.py)
#
# Env: PYTHON (default python3.11), SLUICE_BENCH_VENV (default <repo>/.venv-bench),
#      SLUICE_BENCH_DATA (dataset folder, default ~/.cache/sluice-bench).
# The venv is ~8 GB (torch from PyPI is the CUDA build; it runs on CPU). sluice itself is not
# installed here: build it into this venv when you want the sluice rows (see README.md).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
VENV="${SLUICE_BENCH_VENV:-$REPO/.venv-bench}"
PY="${PYTHON:-python3.11}"
BUILD_DATA=0
for arg in "$@"; do
  case "$arg" in
    --data) BUILD_DATA=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# Debian tools for the audio clips (and apt-get download/dpkg-deb for the source packages).
if ! command -v espeak-ng >/dev/null || ! command -v lame >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng lame
  else
    echo "warning: espeak-ng/lame missing; run: sudo apt-get install espeak-ng lame" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -r "$HERE/requirements.txt" -c "$HERE/constraints.txt"

"$VENV/bin/python" - <<'PY'
import importlib
mods = ["numpy", "PIL", "skimage", "pyarrow", "torch", "torchvision", "tokenizers", "librosa",
        "soundfile", "grain", "ray.data", "matplotlib", "psutil", "webdataset", "moto.server"]
for m in mods:
    importlib.import_module(m)
import soundfile
assert "MP3" in soundfile.available_formats(), "libsndfile without MP3 support"
print("bench venv OK:", ", ".join(mods), "(+ tensorflow, imported lazily by the tf.data peer)")
PY

if [ "$BUILD_DATA" = 1 ]; then
  "$VENV/bin/python" "$HERE/datasets/build.py"
fi
echo "done: $VENV"
