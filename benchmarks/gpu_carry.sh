#!/usr/bin/env bash
# What benchmarks/gpu_check.sh needs on a GPU machine that reaches no registry, made here in
# .devcarry/ (ignored through .git/info/exclude; the device tool's carry is 64 MiB in all, the
# tree included):
#   whl/            nvImageCodec for CUDA 13 with only its JPEG extensions and the CPython 3.12
#                   module (the whole wheel is 25 MB), and nvJPEG 13.0 (what it loads);
#   bench-data.tgz  a subset of each benchmark dataset part (50 images a class, 160 clips, 6 MB
#                   of text, the tokenizer) for the many-core curve, cycled by the runs.
# The sluice wheel itself is `make wheel` (dist/). Then, with the device tool:
#   run(command="OUT=$OUT bash benchmarks/gpu_check.sh", carry=["dist", ".devcarry"])
# DALI is not carried: its wheel alone is far over the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${SLUICE_BENCH_DATA:-$HOME/.cache/sluice-bench}
CARRY=.devcarry
PYV=${GPU_CARRY_PYTHON:-3.12}
grep -qx "/$CARRY/" .git/info/exclude 2>/dev/null || echo "/$CARRY/" >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$CARRY" && mkdir -p "$CARRY/whl"

python3 -m venv "$work/venv" && "$work/venv/bin/pip" -q install wheel
"$work/venv/bin/pip" -q download --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work/dl" nvidia-nvimgcodec-cu13 "nvidia-nvjpeg==13.0.*"
"$work/venv/bin/python" -m wheel unpack -d "$work/un" "$work"/dl/nvidia_nvimgcodec*.whl
pkg=$(echo "$work"/un/nvidia_nvimgcodec*)
tag=cpython-${PYV/./}
rm -rf "$pkg/nvidia/nvimgcodec/include" "$pkg/nvidia/nvimgcodec/tools"
find "$pkg/nvidia/nvimgcodec" -maxdepth 1 -name 'nvimgcodec_impl.cpython-*' ! -name "*$tag-*" -delete
find "$pkg/nvidia/nvimgcodec/extensions" -type f ! -name 'libnvjpeg_ext*' ! -name 'libjpeg_turbo_ext*' -delete
"$work/venv/bin/python" -m wheel pack -d "$CARRY/whl" "$pkg"
cp "$work"/dl/nvidia_nvjpeg-*.whl "$CARRY/whl/"

mkdir -p "$work/d/sluice-bench/text" "$work/d/sluice-bench/audio"
for c in "$DATA"/images/*/; do
  dst="$work/d/sluice-bench/images/$(basename "$c")" && mkdir -p "$dst"
  mapfile -t files < <(find "$c" -name '*.jpg' | sort)
  cp -t "$dst" "${files[@]:0:50}"
done
mapfile -t files < <(find "$DATA/audio" -name '*.mp3' | sort)
cp -t "$work/d/sluice-bench/audio" "${files[@]:0:160}"
head -c 6000000 "$DATA/text/lines.txt" | head -n -1 > "$work/d/sluice-bench/text/lines.txt"
cp -r "$DATA/tokenizer" "$work/d/sluice-bench/"
tar czf "$CARRY/bench-data.tgz" -C "$work/d" sluice-bench
du -sh "$CARRY"/* "$CARRY"/whl/*
