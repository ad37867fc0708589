"""The optimizer end to end: profile → plan → run, plan files, safety on the three workloads,
caching and the runtime controller."""

import json
import pathlib

import numpy as np
import pytest

import sluice
import sluice.audio as A
import sluice.image as I
import sluice.text as T
from sluice import OptimizerOptions, Plan, Profile

FIX = pathlib.Path(__file__).resolve().parent / "fixtures" / "audio"
IMAGES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "fixtures" / "images"


def cv(epochs=1):
    return (
        sluice.read_images(str(IMAGES), labels="parent_dir")
        .repeat(epochs)
        .map(I.decode())
        .map(I.color_jitter(0.4, 0.4, 0.4, 0.1))
        .map(I.random_resized_crop(48))
        .map(I.horizontal_flip())
        .map(I.normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
        .batch(4)
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    lines = [l.strip() for l in pathlib.Path("README.md").read_text().splitlines() if l.strip()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=500, special_tokens=["<EOT>"]))
    d = tmp_path_factory.mktemp("tok")
    tok.save(str(d / "tok.json"))
    (d / "lines.txt").write_text("\n".join(lines) + "\n")
    return d


def nlp(d):
    return (
        sluice.read_text(str(d / "lines.txt"))
        .map(T.tokenize(str(d / "tok.json")))
        .map(T.truncate(32))
        .map(T.pad(32))
        .batch(8)
    )


def asr():
    files = [str(FIX / n) for n in ("chirp_16k_mono.wav", "chirp_16k_mono.flac", "speech.mp3")]
    return (
        sluice.read_files(files)
        .repeat(2)
        .map(A.decode(sample_rate=16000))
        .map(A.spectrogram(n_fft=400, hop_length=160))
        .map(A.time_mask(20))
        .map(A.mel(n_mels=40, sample_rate=16000))
        .map(A.freq_mask(8))
        .map(A.log())
    )


def outputs(it):
    out = []
    for b in it:
        out.append({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in b.items()})
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k] == y[k], k


def typed(it):
    """Outputs as (dtype, shape, bytes) per field: equal means byte for byte."""
    out = []
    for b in it:
        out.append(
            {
                k: (str(v.dtype), v.shape, v.tobytes()) if isinstance(v, np.ndarray) else repr(v)
                for k, v in b.items()
            }
        )
    return out


def test_profile_measures_each_op_and_round_trips(tmp_path):
    ds = cv()
    p = ds.profile(samples=8)
    names = [o["name"] for o in p.ops]
    assert names == ["decode", "color_jitter", "random_resized_crop", "horizontal_flip", "normalize"]
    assert p.data["samples"] == 8 and p.machine["cores"] >= 1
    dec = p.ops[0]
    assert dec["cpu_s"] > 0 and dec["bytes_out"] > dec["bytes_in"]  # JPEG → pixels
    rrc = p.ops[2]
    assert rrc["bytes_out"] < rrc["bytes_in"]  # size-reducing
    assert p.cpu_per_sample("decode") > 0
    p.save(tmp_path / "p.json")
    back = Profile.load(tmp_path / "p.json")
    assert back.data == p.data
    assert "color_jitter" in str(back)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a sluice profile"):
        Profile.load(tmp_path / "bad.json")


def test_a_plan_predicts_for_a_pipeline_whose_ops_fuse_when_run():
    """decode → random_resized_crop fuse into one op at run time; plans (and predict) name
    the unfused ops, so predicting a plan for such a pipeline must not trip over the fusion."""
    ds = sluice.read_images(str(IMAGES)).map(I.decode()).map(I.random_resized_crop(32)).batch(2)
    prof = ds.profile(samples=4)
    plan = ds.optimize(prof)
    assert "decode_random_resized_crop" in str(ds.explain())  # fused when run
    p = plan.predict(ds, prof)
    assert p["throughput"] == pytest.approx(plan.predicted_throughput)
    assert len(list(ds.iter(plan=plan))) == len(list(ds.iter()))


def jitter_bound(ds):
    """A profile of ``ds`` with its counts as measured and fixed costs (no clock): the
    jitter 20 ms an image, every other op 0.1 ms, so what the optimizer decides does not
    depend on how fast or busy the machine is."""
    data = ds.profile(samples=8).data
    for op in data["ops"]:
        op["cpu_s"] = op["wall_s"] = (20e-3 if op["name"] == "color_jitter" else 1e-4) * op["items_in"]
    return Profile(json.dumps(data))


def test_autoorder_moves_the_crop_before_the_jitter_unless_exact():
    ds = cv()
    prof = jitter_bound(ds)
    plan = ds.optimize(prof)
    text = str(plan)
    assert "random_resized_crop" in text and "predicted" in text
    order = [s["label"] for s in plan.stages if "read" in s["label"]][0]
    assert order.index("random_resized_crop") < order.index("color_jitter"), order
    assert any(d.startswith("reorder") for d in plan.decisions)
    exact = ds.optimize(prof, OptimizerOptions(exact=True))
    order = [s["label"] for s in exact.stages if "read" in s["label"]][0]
    assert order.index("color_jitter") < order.index("random_resized_crop"), order
    assert not any(d.startswith("reorder") for d in exact.decisions)


def test_a_reordered_plan_gets_the_fused_decode_crop_and_an_exact_one_does_not():
    # cv() writes decode → jitter → crop: nothing to fuse; the plan moves the crop next to
    # the decode and the run fuses them (op fusion comes after the plan). Exact plans never
    # fuse: their bytes are those of iter(fuse_ops=False).
    ds = cv()
    assert "decode_random_resized_crop" not in ds.explain()
    prof = jitter_bound(ds)
    plan = ds.optimize(prof)
    assert "decode_random_resized_crop" in ds.explain(plan=plan)
    assert "decode_random_resized_crop" not in ds.explain(plan=plan, fuse_ops=False)
    assert sum(len(b["label"]) for b in ds.iter(plan=plan)) == 8
    exact = ds.optimize(prof, OptimizerOptions(exact=True))
    assert "decode_random_resized_crop" not in ds.explain(plan=exact)
    plain = (
        sluice.read_images(str(IMAGES), labels="parent_dir")
        .map(I.decode())
        .map(I.random_resized_crop(24))
        .batch(4)
    )
    assert "decode_random_resized_crop" in plain.explain()
    exact = plain.optimize(plain.profile(samples=4), OptimizerOptions(exact=True))
    same(outputs(plain.iter(seed=6, epoch=0, plan=exact)), outputs(plain.iter(seed=6, epoch=0, fuse_ops=False)))


@pytest.mark.parametrize("workload", ["cv", "nlp", "asr"])
def test_exact_plans_are_byte_identical_on_every_workload(workload, tokenizer):
    ds = {"cv": cv, "nlp": lambda: nlp(tokenizer), "asr": asr}[workload]()
    reference = typed(ds.iter(seed=5, epoch=0))
    prof = ds.profile(samples=10)
    for opts in [OptimizerOptions(exact=True), OptimizerOptions(enable_reorder=False), OptimizerOptions.baseline()]:
        plan = ds.optimize(prof, opts, seed=5)
        assert typed(ds.iter(seed=5, epoch=0, plan=plan)) == reference, opts


def op_order(plan):
    """The plan's op names in execution order."""
    names = []
    for st in plan.stages:
        names += [n for n in st["label"].split("+") if n != "read" and not n.startswith(("batch(", "take("))]
    return names


@pytest.mark.parametrize("workload", ["cv", "nlp", "asr"])
def test_default_plans_change_outputs_only_where_ops_moved(workload, tokenizer):
    # Default options allow approximate moves (e.g. crop before colour jitter). Outputs are
    # byte-identical unless the plan moved an op; then only the fields moved ops write can
    # differ, with the same dtypes and shapes.
    ds = {"cv": lambda: cv(epochs=2), "nlp": lambda: nlp(tokenizer), "asr": asr}[workload]()
    reference = typed(ds.iter(seed=6, epoch=0))
    prof = ds.profile(samples=10)
    plan = ds.optimize(prof, seed=6)
    default = ds.optimize(prof, OptimizerOptions.baseline(), seed=6)
    # Ops the cache computes before the stages are not in the stages' order.
    order = op_order(plan)
    moved = order != [n for n in op_order(default) if n in order]
    got = typed(ds.iter(seed=6, epoch=0, plan=plan))
    assert len(got) == len(reference)
    if not moved:
        assert got == reference, plan
        return
    assert any(d.startswith("reorder") for d in plan.decisions)
    written = {"cv": {"image"}, "nlp": {"input_ids"}, "asr": {"audio"}}[workload]
    for g, r in zip(got, reference):
        assert g.keys() == r.keys()
        for k in g:
            if k in written:
                assert g[k][:2] == r[k][:2], k  # dtype and shape
            else:
                assert g[k] == r[k], k


def test_reordered_plan_differs_only_where_ops_moved():
    ds = cv()
    plan = ds.optimize(ds.profile(samples=8))
    got = outputs(ds.iter(seed=1, epoch=0, plan=plan))
    ref = outputs(ds.iter(seed=1, epoch=0))
    # Same labels and shapes; pixels differ because the jitter now sees the crop.
    assert [b["label"] for b in got] == [b["label"] for b in ref]
    assert [np.shape(b["image"]) for b in got] == [np.shape(b["image"]) for b in ref]


def test_plan_files_load_and_refuse_other_pipelines(tmp_path):
    ds = cv()
    plan = ds.optimize(ds.profile(samples=4))
    plan.save(tmp_path / "plan.json")
    loaded = Plan.load(tmp_path / "plan.json")
    assert loaded.data == plan.data
    assert loaded.predicted_throughput > 0 and loaded.bottleneck
    assert sum(len(b["label"]) for b in ds.iter(plan=loaded)) == 8
    assert "physical plan" in ds.explain(plan=loaded)
    other = cv(epochs=2)
    with pytest.raises(ValueError, match="different pipeline|re-run optimize"):
        other.iter(plan=loaded)
    with pytest.raises(ValueError, match="different pipeline"):
        other.optimize(ds.profile(samples=2))
    data = json.loads((tmp_path / "plan.json").read_text())
    data["version"] = 99
    (tmp_path / "old.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="version"):
        Plan.load(tmp_path / "old.json")


def test_iter_optimize_true_profiles_plans_and_runs():
    ds = cv()
    it = ds.iter(seed=2, optimize=True)
    n = sum(len(b["label"]) for b in it)
    assert n == 8
    assert isinstance(it.plan, Plan) and it.plan.stages
    it = ds.iter(seed=2, epoch=0, optimize=OptimizerOptions(exact=True))
    same(outputs(it), outputs(ds.iter(seed=2, epoch=0)))


def test_optimize_falls_back_to_the_default_plan_it_cannot_beat():
    # One cheap op over a range: the default plan is as good as any; the plan says so, the
    # run is the default's, and a later epoch reuses the plan instead of profiling again.
    ds = sluice.range(3000).map(sluice.ops.select(["id"])).batch(100)
    it = ds.iter(seed=1, epoch=0, optimize=True)
    same(outputs(it), outputs(ds.iter(seed=1, epoch=0)))
    last = it.plan.data["decisions"][-1]
    assert last.startswith("fallback: ran the default plan"), last
    again = ds.iter(seed=1, epoch=1, optimize=True)
    assert again.plan.to_json() == it.plan.to_json()  # made once, reused
    again.close()
    # With the fallback off the optimizer's own plan runs, and says nothing of a fallback.
    first = ds.iter(seed=1, epoch=0, optimize=OptimizerOptions(enable_fallback=False))
    same(outputs(first), outputs(ds.iter(seed=1, epoch=0)))
    off = ds.iter(seed=1, epoch=0, optimize=OptimizerOptions(enable_fallback=False))
    assert off.plan.to_json() == first.plan.to_json()
    assert not any(d.startswith("fallback") for d in off.plan.data["decisions"])
    same(outputs(off), outputs(ds.iter(seed=1, epoch=0)))


def test_optimize_plans_from_its_first_runs_own_timings(monkeypatch):
    # The first optimize=True run is the default plan, timing its ops: no profile runs before
    # it or after it, and the plan it leaves for later runs is made from what it timed.
    ds = cv(epochs=3)
    monkeypatch.setattr(ds, "profile", lambda *a, **k: pytest.fail("profiled before the run"))
    it = ds.iter(seed=2, epoch=0, optimize=True)
    same(outputs(it), outputs(ds.iter(seed=2, epoch=0)))
    plan = it.plan
    assert isinstance(plan, Plan) and plan.stages
    later = ds.iter(seed=2, epoch=1, optimize=True)
    assert later.plan.to_json() == plan.to_json()
    assert sum(len(b["label"]) for b in later) == 24


def test_a_runs_timings_make_the_profile_a_profile_would():
    # decode + random_resized_crop fuse in the default plan; the run's timings still give
    # each its own entry, with what each handed on: the decoded images, then the crops.
    ds = sluice.read_images(str(IMAGES), labels="parent_dir").map(I.decode()).map(I.random_resized_crop(48)).batch(4)
    run = ds._native.iter(seed=0, time_ops=True)
    assert sum(len(b["label"]) for b in run) == 8
    timed = Profile(sluice._native.run_profile(ds._native, run.stats_handle(), 100, 0.01))
    whole = ds.profile(samples=8)
    assert [o["name"] for o in timed.ops] == [o["name"] for o in whole.ops] == ["decode", "random_resized_crop"]
    assert timed.data["samples"] == 8 and timed.data["source"]["items_out"] == 8
    for t, w in zip(timed.ops, whole.ops):
        for k in ("items_in", "items_out", "bytes_in", "bytes_out", "bytes_written"):
            assert t[k] == w[k], (t["name"], k, t[k], w[k])
        assert t["cpu_s"] > 0
    assert timed.data["output"] == whole.data["output"]
    # A run that did not time its ops gives none.
    untimed = ds._native.iter(seed=0)
    assert sum(len(b["label"]) for b in untimed) == 8
    assert sluice._native.run_profile(ds._native, untimed.stats_handle(), 8) is None


def test_a_streamed_sources_run_times_its_read_and_ops(tokenizer):
    ds = nlp(tokenizer)  # read_text streams: the source thread times the read
    run = ds._native.iter(seed=0, time_ops=True)
    batches = list(run)
    timed = Profile(sluice._native.run_profile(ds._native, run.stats_handle(), 100, 0.01))
    whole = ds.profile(samples=10_000)
    lines = sum(len(b["input_ids"]) for b in batches)
    assert timed.data["samples"] == whole.data["samples"] == lines
    assert [o["name"] for o in timed.ops] == [o["name"] for o in whole.ops] == ["tokenize", "truncate", "pad"]
    for t, w in zip(timed.ops, whole.ops):
        assert (t["items_in"], t["bytes_in"], t["bytes_out"]) == (w["items_in"], w["bytes_in"], w["bytes_out"]), t["name"]
    assert timed.data["source"]["bytes_out"] == whole.data["source"]["bytes_out"]


def test_a_first_run_stopped_early_is_followed_by_a_profile():
    ds = sluice.range(100_000).map(sluice.ops.select(["id"])).batch(4)
    it = ds.iter(seed=0, optimize=True, num_threads=0, chunk_size=4)
    next(it)
    assert it.plan is None  # 4 of the 100 samples a profile would run
    it.close()
    later = ds.iter(seed=0, optimize=True)
    assert isinstance(later.plan, Plan)
    later.close()


def test_optimize_keeps_a_plan_predicted_faster():
    # The jitter written before a crop to 48 px, with fixed costs (no clock): the jitter
    # dominates, so moving the crop first is predicted to pay and the plan is kept.
    ds = cv()
    plan = ds.optimize(jitter_bound(ds), seed=2)
    last = plan.data["decisions"][-1]
    assert last.startswith("fallback: kept the optimized plan"), last
    assert any(d.startswith("reorder") for d in plan.data["decisions"])
    assert sum(len(b["label"]) for b in ds.iter(seed=2, plan=plan)) == 8


def test_profile_epoch_share_runs_a_share_of_the_epoch():
    ds = sluice.range(5000).map(sluice.ops.select(["id"]))
    assert ds.profile(samples=100, epoch_share=0.01).data["samples"] == 50
    assert ds.profile(samples=100, epoch_share=0.001).data["samples"] == 16  # the least
    assert sluice.range(10).profile(samples=100, epoch_share=0.5).data["samples"] == 10
    for bad in (-0.1, 1.5, "0.1", True):
        with pytest.raises(ValueError, match="epoch_share"):
            ds.profile(epoch_share=bad)


def test_cache_computes_the_prefix_once():
    calls = []

    def expensive(s):
        calls.append(s["id"])
        return {"id": s["id"], "sq": s["id"] ** 2}

    ds = sluice.range(50).map(expensive).cache().repeat(3).batch(10)
    total = [int(x) for b in ds for x in b["sq"]]
    assert total == [i * i for i in range(50)] * 3
    assert sorted(calls) == list(range(50))
    # A second iteration of the same pipeline reuses the cache.
    assert sum(len(b["id"]) for b in ds) == 150
    assert len(calls) == 50
    with pytest.raises(ValueError, match="deterministic|random"):
        sluice.range(5).map(lambda s, rng: s).cache()
    with pytest.raises(ValueError, match="before"):
        sluice.range(5).batch(2).cache()


def test_cache_spills_what_memory_cannot_hold_to_disk(tmp_path, monkeypatch):
    import glob
    import os
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    calls = []

    def expensive(s):
        calls.append(s["id"])
        return {"id": s["id"], "v": np.full(100, s["id"], dtype=np.int64)}

    def run(disk_bytes):
        calls.clear()
        # ~800 bytes a sample: memory for 4 of 40, the disk tier for about 19 more.
        ds = sluice.range(40).map(expensive).cache(4000, disk_bytes=disk_bytes).repeat(3).batch(8)
        out = [int(x) for b in ds for x in b["v"][:, 0]]
        assert out == list(range(40)) * 3
        return len(calls)

    memory_only = run(0)
    assert memory_only == 40 + 2 * 36
    with_disk = run(16_400)
    # Samples held on disk are read back, not recomputed, in the 2 later epochs.
    assert 40 + 2 * 15 <= with_disk <= 40 + 2 * 20, with_disk
    assert len(glob.glob(str(tmp_path / "sluice-cache-*"))) <= 1


def test_caching_rule_caches_decode_when_epochs_repeat():
    ds = cv(epochs=3)
    plan = ds.optimize(ds.profile(samples=8))
    assert plan["cache"] is not None, plan
    assert any(d.startswith("caching") and "cached" in d for d in plan.decisions)
    same(outputs(ds.iter(seed=4, epoch=0, plan=ds.optimize(ds.profile(samples=8), OptimizerOptions(exact=True)))),
         outputs(ds.iter(seed=4, epoch=0)))


def test_controller_plan_runs_unchanged_output():
    # The controller only changes how many workers take chunks, never what comes out.
    ds = cv(epochs=4)
    plan = ds.optimize(ds.profile(samples=4), OptimizerOptions(enable_controller=True, exact=True))
    assert plan["controller"] is True
    it = ds.iter(seed=3, epoch=0, plan=plan)
    same(outputs(it), outputs(ds.iter(seed=3, epoch=0)))
    for d in it.stats().data.get("controller", []):
        assert d["workers"] >= 1 and d["why"]


def _busy(s):
    # Pure-Python work that holds the GIL (~0.5 ms).
    x = 0
    for i in range(20000):
        x += i * i
    return {"id": s["id"], "x": x % 1000 + s["id"]}


def test_placement_puts_a_dominant_python_stage_on_the_process_pool():
    import psutil

    ds = sluice.range(64).map(_busy).batch(8)
    plan = ds.optimize(ds.profile(samples=16))
    if plan["cpus"] < 2:
        pytest.skip("one core: no process pool")
    assert any(s.get("variant") == "pool" and s.get("backend") == "processes" for s in plan.stages), str(plan)
    assert any("process pool" in d for d in plan.decisions)
    same(outputs(ds.iter(epoch=0, plan=plan)), outputs(ds.iter(epoch=0)))
    assert not [c for c in psutil.Process().children(recursive=True) if c.is_running() and c.status() != "zombie"]


def test_caches_of_different_data_or_functions_never_mix(tmp_path):
    # Caches are shared by content. Two folders with as many files print alike, and two lambdas
    # print alike (one name): neither may read the other's cache.
    for d, n in (("a", 1), ("b", 2)):
        (tmp_path / d).mkdir()
        for i in range(3):
            (tmp_path / d / f"{i}.bin").write_bytes(bytes([n]) * (i + 1))
    for d, n in (("a", 1), ("b", 2)):
        got = list(sluice.read_files(str(tmp_path / d)).cache())
        assert [s["path"] for s in got] == sorted(str(tmp_path / d / f"{i}.bin") for i in range(3))
        assert {bytes(s["bytes"])[:1] for s in got} == {bytes([n])}
    f = lambda s: {"id": s["id"] + 1}  # noqa: E731
    g = lambda s: {"id": s["id"] * 10}  # noqa: E731
    assert [s["id"] for s in sluice.range(3).map(f).cache()] == [1, 2, 3]
    assert [s["id"] for s in sluice.range(3).map(g).cache()] == [0, 10, 20]
    items = [sluice.from_items([{"v": v}] * 2).cache() for v in (1, 2)]
    assert [[s["v"] for s in ds] for ds in items] == [[1, 1], [2, 2]]
