"""Checkpoints that do not fit the pipeline are refused with a ValueError naming what is
wrong, never accepted to skip the rest of the data silently."""

import copy
import json

import pytest

import sluice
from procs import run_py


def source_node(state):
    node = state["state"]
    while node["parent"] is not None:
        node = node["parent"]
    return node


def checkpoint(ds, n=1, **iter_args):
    it = ds.iter(**iter_args)
    for _ in range(n):
        next(it)
    return it.state_dict()


@pytest.mark.parametrize("pos", [500, 501, 10**15, 2**64 - 1])
def test_positions_past_the_end_are_refused(pos):
    # They used to skip the rest of the epoch: 0 outputs, no error.
    ds = sluice.range(500)
    st = checkpoint(ds)
    source_node(st)["own"]["at"]["pos"] = pos
    with pytest.raises(ValueError, match=f"position {pos} of epoch 0, but that epoch has 500"):
        ds.iter().load_state_dict(st)
    # The last position is fine: a checkpoint after the last output resumes to nothing.
    source_node(st)["own"]["at"]["pos"] = 499
    it = ds.iter()
    it.load_state_dict(st)
    assert list(it) == []


def test_positions_count_this_ranks_shard():
    ds = sluice.range(10).shard(1, 3)  # 3 samples on rank 1
    st = checkpoint(ds)
    source_node(st)["own"]["at"]["pos"] = 3
    with pytest.raises(ValueError, match="has 3 sample"):
        ds.iter().load_state_dict(st)


@pytest.mark.parametrize("value", [-1, "3", 1.5, None, True, 2**64, [1]])
def test_positions_of_the_wrong_type_are_refused(value):
    ds = sluice.range(500).batch(4)
    st = checkpoint(ds)
    source_node(st)["own"]["at"]["pos"] = value
    with pytest.raises(ValueError, match="bad 'at'.*integers >= 0"):
        ds.iter().load_state_dict(st)
    del source_node(st)["own"]["at"]
    with pytest.raises(ValueError, match="missing 'at'"):
        ds.iter().load_state_dict(st)


def test_an_epoch_past_the_last_is_refused():
    # epoch=5 under repeat(2) used to yield nothing.
    ds = sluice.range(10).repeat(2)
    st = checkpoint(ds)
    for epoch in (2, 5):
        source_node(st)["own"]["at"]["epoch"] = epoch
        with pytest.raises(ValueError, match=f"at epoch {epoch}, but this pipeline has 2 epoch"):
            ds.iter().load_state_dict(st)
    source_node(st)["own"]["at"]["epoch"] = 1
    it = ds.iter()
    it.load_state_dict(st)
    assert [s["id"] for s in it] == list(range(1, 10))


def test_take_and_counters_are_checked():
    ds = sluice.range(100).limit(10)
    st = checkpoint(ds)
    st["state"]["own"]["at"]["pos"] = 10
    with pytest.raises(ValueError, match="output 10 of take"):
        ds.iter().load_state_dict(st)
    st = checkpoint(ds)
    st["state"]["own"]["counter"] = -1
    with pytest.raises(ValueError, match="bad 'counter'"):
        ds.iter().load_state_dict(st)


def test_a_stream_position_past_its_end_is_refused(tmp_path):
    p = tmp_path / "x.tar"
    import io
    import tarfile

    with tarfile.open(p, "w") as tar:
        for i in range(5):
            data = str(i).encode()
            info = tarfile.TarInfo(f"{i:03d}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    ds = sluice.read_webdataset(str(p))
    st = checkpoint(ds)
    source_node(st)["own"]["at"]["pos"] = 50
    it = ds.iter()
    it.load_state_dict(st)
    with pytest.raises(ValueError, match="past its end"):
        list(it)


def scale(s):
    return {"id": s["id"] * 2}


def scale_v2(s):
    return {"id": s["id"] * 3}


scale_v2.__qualname__ = "scale"  # as if the file had been edited between the runs


def test_a_function_with_another_body_under_the_same_name_is_refused():
    # The fingerprint named functions only: this checkpoint used to load.
    st = checkpoint(sluice.range(100).map(scale))
    other = sluice.range(100).map(scale_v2)
    with pytest.raises(ValueError, match="different code for the function 'scale'.*strict=False"):
        other.iter().load_state_dict(st)
    # The escape hatch, for a function changed on purpose.
    it = other.iter()
    it.load_state_dict(st, strict=False)
    assert next(it)["id"] == 3


def test_captured_values_lambdas_and_defaults_count():
    def make(k):
        return lambda s: {"id": s["id"] + k}

    st = checkpoint(sluice.range(10).map(make(1), name="f"))
    sluice.range(10).map(make(1), name="f").iter().load_state_dict(st)  # same closure value
    with pytest.raises(ValueError, match="different code"):
        sluice.range(10).map(make(2), name="f").iter().load_state_dict(st)

    def f(s, k=1):
        return s

    st = checkpoint(sluice.range(10).filter(f))

    def f(s, k=2):  # noqa: F811
        return s

    with pytest.raises(ValueError, match=r"different code for the function '.*\bf' \(filter at step 1\)"):
        sluice.range(10).filter(f).iter().load_state_dict(st)


def test_built_in_op_arguments_count():
    st = checkpoint(sluice.range(10).map(sluice.ops.rename("id", "a")))
    with pytest.raises(ValueError, match="different pipeline"):
        sluice.range(10).map(sluice.ops.rename("id", "b")).iter().load_state_dict(st)


CHILD = """
import json, sys, sluice
OFFSET = 7
def shift(s):
    return {"id": s["id"] + OFFSET}
ds = sluice.range(100).shuffle(seed=1).map(shift).map(lambda s: {"id": s["id"] * 2}).batch(4)
if sys.argv[1:] == []:
    it = ds.iter(); next(it); print(json.dumps(it.state_dict()))
"""


def test_the_same_code_loads_in_another_process():
    # Digests use no addresses or hash randomization: a new interpreter (new PYTHONHASHSEED)
    # computes the same ones.
    r = run_py(CHILD, timeout=60)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert {f["name"] for f in st["functions"]} == {"shift", "<lambda>"}
    r2 = run_py(CHILD + f"\nit = ds.iter(); it.load_state_dict(json.loads({r.stdout!r})); print(len(list(it)))", timeout=60)
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.split()[-1] == "24"
    # A changed global constant the function reads is a change of code.
    r3 = run_py(
        CHILD.replace("OFFSET = 7", "OFFSET = 8")
        + f"\nit = ds.iter(); it.load_state_dict(json.loads({r.stdout!r}))",
        timeout=60,
    )
    assert r3.returncode != 0 and "different code for the function 'shift'" in r3.stderr, r3.stderr


def test_old_checkpoints_without_function_codes_still_load():
    ds = sluice.range(10).map(scale)
    st = checkpoint(ds)
    st = copy.deepcopy(st)
    del st["functions"]
    it = ds.iter()
    it.load_state_dict(st)
    assert len(list(it)) == 9


def _folder(root, names):
    root.mkdir(exist_ok=True)
    for name in names:
        (root / name).write_bytes(name.encode())


def test_a_checkpoint_over_another_listing_of_the_same_size_is_refused(tmp_path):
    # One file removed and another added: the count (all the fingerprint knows) is the same,
    # so every position after the change would have named another file, silently.
    data = tmp_path / "data"
    _folder(data, ["a.bin", "b.bin", "c.bin", "d.bin"])
    st = checkpoint(sluice.read_files(data), n=1)
    assert st["data"]
    (data / "b.bin").unlink()
    _folder(data, ["e.bin"])
    changed = sluice.read_files(data)
    with pytest.raises(ValueError, match="saved over other data: step 'read_files'.*strict=False"):
        changed.iter().load_state_dict(st)
    # Accepted on purpose: positions count in the new listing.
    it = changed.iter()
    it.load_state_dict(st, strict=False)
    assert [bytes(s["bytes"]) for s in it] == [b"c.bin", b"d.bin", b"e.bin"]
    # The same files listed again load; so do checkpoints from before listings were recorded.
    (data / "e.bin").unlink()
    _folder(data, ["b.bin"])
    it = sluice.read_files(data).iter()
    it.load_state_dict(st)
    assert [bytes(s["bytes"]) for s in it] == [b"b.bin", b"c.bin", b"d.bin"]
    old = copy.deepcopy(st)
    del old["data"]
    (data / "b.bin").unlink()
    _folder(data, ["e.bin"])
    it = sluice.read_files(data).iter()
    it.load_state_dict(old)
    assert len(list(it)) == 3


def test_where_the_object_cache_lives_is_not_part_of_the_listing(tmp_path):
    data = tmp_path / "data"
    _folder(data, ["a.bin", "b.bin"])
    st = checkpoint(sluice.read_files(data, cache_dir=tmp_path / "one"))
    it = sluice.read_files(data, cache_dir=tmp_path / "two").iter()
    it.load_state_dict(st)
    assert len(list(it)) == 1
