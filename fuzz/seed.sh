#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seeds from the repository's fixtures and small generated
# files (the corpus is git-ignored). Run from anywhere; needs python3 and, for the state and
# plan seeds (real checkpoints and optimizer plans written by the targets themselves), the
# fuzz targets built: RUSTC_BOOTSTRAP=1 cargo fuzz build -a.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=..
IMG=$ROOT/crates/sluice-imgproc/tests/fixtures
AUD=$ROOT/crates/sluice-audioproc/tests/fixtures
C=corpus
mkdir -p $C/{image_jpeg,image_png,audio_mp3,webdataset,csv,jsonl,state,plan,spec}

# Images: the small fixtures (every JPEG flavour: baseline 4:2:0/4:2:2/4:4:4, progressive,
# restart markers, gray, CMYK, YCCK, EXIF orientations; every PNG colour type and depth).
# (Not fuzz_slow_progressive.jpg: a known 1 s unit under ASan that only slows the search.)
for f in $IMG/*.jpg; do
    case $f in *fuzz_slow*) continue ;; esac
    [ "$(stat -c %s "$f")" -le 6000 ] && cp "$f" $C/image_jpeg/
done
cp $IMG/*.png $C/image_png/

# Audio: the MP3 (and prefixes of it, so small inputs start from real frames), plus the
# WAV/FLAC/Ogg fixtures the probe also reaches.
cp $AUD/speech.mp3 $C/audio_mp3/
head -c 4096 $AUD/speech.mp3 > $C/audio_mp3/speech_4k.mp3
head -c 1024 $AUD/speech.mp3 > $C/audio_mp3/speech_1k.mp3
cp $AUD/chirp_16k_mono.{wav,flac,ogg} $C/audio_mp3/

python3 - "$C" <<'PY'
import io, json, sys, tarfile
c = sys.argv[1]

def tar(name, members, fmt=tarfile.USTAR_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for m, data, kind in members:
            info = tarfile.TarInfo(m)
            info.type = kind
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    open(f"{c}/webdataset/{name}", "wb").write(buf.getvalue())

F, D = tarfile.REGTYPE, tarfile.DIRTYPE
tar("basic.tar", [("a/0.jpg", b"\xff\xd8\xff", F), ("a/0.cls", b"1", F), ("a/1.txt", b"hi", F), ("a/1.cls", b"0", F)])
tar("dirs.tar", [("d", b"", D), ("d/x.y.z", b"abc", F), ("noext", b"q", F), ("d/x.w", b"", F)])
tar("gnu_long.tar", [("l" * 150 + "/0.txt", b"long", F), ("s/0.cls", b"2", F)], tarfile.GNU_FORMAT)
tar("pax.tar", [("p/\u00e9.txt", b"pax", F), ("p/\u00e9.cls", b"3", F)], tarfile.PAX_FORMAT)
tar("dup.tar", [("k/0.txt", b"a", F), ("k/0.txt", b"b", F)])

csv = {
    0x00: b"a,b,c\n1,x,0.5\n2,\"y, z\",1.5\n3,,\n",
    0x01: b"a;b\n1;true\n2;false\n",
    0x02: b"a\tb\n\"multi\nline\"\t2\n",
    0x0c: b"1,2\n3\n4,5,6\n",
    0x40: b"a,b\n1,2\n,3\n",
    0x50: b"a,b\n1.5,2\nnan,3\n",
    0x60: b"a,b\ntrue,1\nFalse,0\n",
}
for flags, body in csv.items():
    open(f"{c}/csv/seed-{flags:02x}", "wb").write(bytes([flags]) + body)

jsonl = {
    0x00: b'{"a": 1, "b": "x", "t": [1, 2, 3], "f": [0.5, 1.5], "n": null}\n\n{"a": 2, "l": [[1], "s"], "o": {"k": 1}}\n',
    0x01: b'{"a": 1}\nnot json\n[1, 2]\n{"a": "\xff"}\n',
    0x03: b'{"a": "\xff\xfe"}\r\n{"b": 1e400}\n',
    0x30: b'{"a": "7", "b": 3.0}\n{"a": 8.5}\n',
    0x90: b'{"a": 1, "b": "true"}\n{"b": 1}\n',
    0x0c: b"plain text\n\nline two\r\n",
}
for flags, body in jsonl.items():
    open(f"{c}/jsonl/seed-{flags:02x}", "wb").write(bytes([flags]) + body)
PY

# Pipeline files: the example, plus JSON ones with every step and op family.
{ printf '\x00'; cat $ROOT/examples/pipeline.toml; } > $C/spec/example.toml
printf '\x00%s' '
seed = 3
[source]
source = "read_jsonl"
paths = ["x.jsonl"]
schema = {id = "int"}
on_error = "skip"
[[steps]]
step = "pack"
length = 4
separator = 0
[[steps]]
step = "sort"
by = ["id"]
memory_budget = 100
' > $C/spec/pack.toml
printf '\x01%s' '{"seed": 1, "num_threads": 2, "source": {"source": "range", "n": 20},
 "steps": [{"step": "shuffle"}, {"step": "shard", "rank": 0, "world_size": 2},
  {"step": "map", "op": "select", "fields": ["id"]}, {"step": "repeat", "epochs": 2},
  {"step": "shuffle_buffer", "size": 4}, {"step": "take", "n": 9}, {"step": "prefetch", "n": 2},
  {"step": "batch", "size": 3, "drop_last": true}]}' > $C/spec/steps.json
printf '\x01%s' '{"source": {"source": "read_images", "paths": ["imgs"], "labels": "parent_dir"},
 "steps": [{"step": "map", "op": "image.decode"},
  {"step": "map", "op": "image.random_resized_crop", "size": 8},
  {"step": "map", "op": "image.horizontal_flip"},
  {"step": "map", "op": "image.normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]},
  {"step": "batch", "size": 2}]}' > $C/spec/images.json
printf '\x01%s' '{"source": {"source": "read_csv", "paths": ["x.csv"], "delimiter": ",", "on_error": "skip"},
 "steps": [{"step": "groupby", "keys": ["name"], "aggs": [{"name": "n", "func": "count"},
  {"name": "s", "func": "sum", "field": "x"}]}, {"step": "repartition", "n": 2}]}' > $C/spec/relational.json
printf '\x01%s' '{"source": {"source": "read_webdataset", "paths": ["s.tar"], "shuffle_shards": 7},
 "steps": [{"step": "shuffle_buffer", "size": 2, "seed": 1}, {"step": "map", "op": "rename", "from": "cls", "to": "label"}]}' > $C/spec/wds.json
printf '\x01%s' '{"source": {"source": "read_text", "paths": ["t.txt"], "errors": "replace"},
 "steps": [{"step": "map", "op": "text.tokenize", "tokenizer": "tok.json"}, {"step": "map", "op": "text.truncate", "max_length": 4}]}' > $C/spec/text.json

# Absurd sizes (each aborted a run before this round's fixes; now errors or bounded): numbers
# a mutator rarely makes.
for step in 'step = "batch"\nsize' 'step = "shuffle_buffer"\nsize' 'step = "prefetch"\nn' \
            'step = "pack"\nfield = "id"\nlength' 'step = "repartition"\nn'; do
    name=$(printf "$step" | head -1 | tr -dc a-z_ | sed 's/step//')
    printf "\x00[source]\nsource = \"range\"\nn = 10\n[[steps]]\n$step = 1000000000000000\n" \
        > $C/spec/huge_$name.toml
done
printf '\x00num_threads = 100000\n[source]\nsource = "range"\nn = 3\n' > $C/spec/huge_threads.toml

# Checkpoints and plans: written by the targets from the fixed pipelines (real ones).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/root/.cache/sluice-target-fuzz}
for t in state plan; do
    SLUICE_FUZZ_SEEDS=$PWD/$C/$t RUSTC_BOOTSTRAP=1 cargo fuzz run -a $t $C/$t -- -runs=0 >/dev/null 2>&1
done
# The same for plans: a stage with a huge queue, one with huge thread counts.
python3 - "$C/plan" <<'PY'
import json, sys
d = sys.argv[1]
raw = open(f"{d}/plan-0", "rb").read()
plan = json.loads(raw[1:])
for key, value in [("queue_depth", 10**15), ("threads", 100000)]:
    p = json.loads(json.dumps(plan))
    p["stages"][0][key] = value
    open(f"{d}/huge_{key}", "wb").write(raw[:1] + json.dumps(p).encode())
PY
for t in image_jpeg image_png audio_mp3 webdataset csv jsonl state plan spec; do
    echo "$t: $(ls $C/$t | wc -l) seeds"
done
