#!/usr/bin/env bash
# A release build of another commit's bindings, for `consumer_ab.py --a DIR/python`:
#
#     benchmarks/build_at.sh 5bf3c97 /tmp/ab-5bf3c97
#
# checks COMMIT out as a git worktree in DIR, builds `sluice-py` with the `release` profile
# (what `MATURIN_PROFILE=release make build` compiles; its own target folder, so the
# checkout's build is left as it is) and puts the library where `import sluice` finds it
# from DIR/python. No venv is made: consumer_ab.py runs each side with the bench venv.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 COMMIT DIR" >&2; exit 2; }
commit=$1 dir=$2
target=${AB_TARGET_DIR:-$HOME/.cache/sluice-target-ab}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
git -C "$repo" worktree remove --force "$dir" 2>/dev/null || rm -rf "$dir"
git -C "$repo" worktree add --force --detach "$dir" "$commit" >/dev/null
(cd "$dir" && CARGO_TARGET_DIR=$target cargo build -q --release -p sluice-py)
cp "$target/release/lib_native.so" "$dir/python/sluice/_native.abi3.so"
echo "$dir/python"
