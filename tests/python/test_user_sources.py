"""Your own data: ``from_source`` over any ``__len__`` + ``__getitem__`` object (random access,
read lazily on the engine's threads) and ``from_generator`` (a stream, ``fn()`` per epoch)."""

import collections
import pickle
import threading
import time

import numpy as np
import pytest

import sluice
from compare import same


class ListLike:
    """A plain list-like class: ints, which become ``{"item": i}``; counts its reads."""

    def __init__(self, n):
        self.n = n
        self.reads = []  # list.append is atomic under the GIL: readers run on several threads
        self.threads = set()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads.append(i)
        self.threads.add(threading.get_ident())
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i * 3


class MapStyle:
    """What a torch map-style ``Dataset`` looks like (torch itself is not needed): dicts of
    arrays, ``__getitem__`` by index, ``__len__``."""

    def __init__(self, n, dim=4):
        self.n, self.dim = n, dim

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        x = np.arange(self.dim, dtype=np.float32) + idx
        return {"x": x, "label": idx % 5, "name": f"s{idx}"}


def pipeline(obj, world=1, rank=0):
    return sluice.from_source(obj).shuffle(seed=3).shard(rank, world).batch(4)


# from_source ------------------------------------------------------------------------------
def test_list_like_items_become_the_field():
    assert sluice.from_source(ListLike(3)).take(3) == [{"item": 0}, {"item": 3}, {"item": 6}]
    assert sluice.from_source(ListLike(2), field="n").take(2) == [{"n": 0}, {"n": 3}]
    assert sluice.from_source(ListLike(0)).take(3) == []


@pytest.mark.parametrize("make", [lambda: ListLike(50), lambda: MapStyle(50)])
def test_shuffle_shard_batch_byte_identical_across_thread_counts(make):
    runs = {t: list(pipeline(make(), 2, 1).iter(seed=0, epoch=0, num_threads=t)) for t in (0, 1, 2)}
    same(runs[0], runs[1])
    same(runs[0], runs[2])
    # A shuffled shard: 25 samples, not in index order.
    key = "item" if "item" in runs[0][0] else "label"
    got = np.concatenate([b[key] for b in runs[0]])
    assert len(got) == 25 and list(got) != sorted(got)


def test_dict_items_keep_their_fields_and_arrays():
    (b,) = sluice.from_source(MapStyle(3)).batch(3).take(1)
    assert b["x"].dtype == np.float32 and b["x"].shape == (3, 4)
    assert b["x"][2].tolist() == [2, 3, 4, 5]
    assert b["label"].tolist() == [0, 1, 2] and b["name"] == ["s0", "s1", "s2"]


@pytest.mark.parametrize("threads", [0, 2])
def test_every_index_read_exactly_once_per_epoch_and_epochs_reshuffle(threads):
    obj = ListLike(40)
    ds = sluice.from_source(obj).shuffle(seed=1)
    orders = []
    for _ in range(2):
        obj.reads.clear()
        orders.append([s["item"] // 3 for s in ds.iter(num_threads=threads)])
        assert sorted(obj.reads) == list(range(40))
    assert sorted(orders[0]) == sorted(orders[1]) == list(range(40))
    assert orders[0] != orders[1]
    if threads:
        assert threading.get_ident() not in obj.threads  # read on the engine's threads


def test_lazy_reads_nothing_until_asked():
    obj = ListLike(10**9)  # O(1): nothing is materialised, even for a huge shuffled length
    ds = sluice.from_source(obj).shuffle(seed=0).shard(1, 4).repeat(3)
    assert obj.reads == []
    got = ds.take(5)
    assert len(got) == 5 and all(s["item"] % 3 == 0 for s in got)
    assert len(obj.reads) < 10_000


@pytest.mark.parametrize("threads", [0, 2])
def test_state_dict_mid_epoch_resumes_on_a_fresh_object(threads):
    full = list(pipeline(MapStyle(30)).iter(seed=5, epoch=1))
    it = pipeline(MapStyle(30)).iter(seed=5, epoch=1, num_threads=threads)
    head = [next(it) for _ in range(3)]
    state = it.state_dict()
    fresh = pipeline(MapStyle(30)).iter(seed=5, num_threads=2)
    fresh.load_state_dict(state)
    same(head + list(fresh), full)


def test_checkpoint_names_type_and_length():
    state = pipeline(MapStyle(30)).iter(seed=0).state_dict()
    # A changed object of the same type and length loads (documented); another length does not.
    pipeline(MapStyle(30, dim=2)).iter(seed=0).load_state_dict(state)
    with pytest.raises(ValueError):
        pipeline(MapStyle(31)).iter(seed=0).load_state_dict(state)
    with pytest.raises(ValueError):
        pipeline(ListLike(30)).iter(seed=0).load_state_dict(state)


def test_elastic_resume_two_to_three_ranks_delivers_every_sample_once():
    n = 60

    def ds(rank, world):
        return sluice.from_source(ListLike(n)).shuffle(seed=2).shard(rank, world)

    seen = collections.Counter()
    states = []
    for r in range(2):
        it = ds(r, 2).iter(seed=4)
        for _ in range(5 + 5 * r):  # 45 left: 15 per new rank, so equal shards drop none
            seen[next(it)["item"]] += 1
        states.append(it.state_dict())
    merged = sluice.elastic_state(states)
    for r in range(3):
        it = ds(r, 3).iter(seed=4, num_threads=r)
        it.load_state_dict(merged)
        seen.update(s["item"] for s in it)
    assert seen == collections.Counter(3 * i for i in range(n))


def _tag(s):
    return {"item": s["item"], "tagged": s["item"] + 1}


def test_process_pool_with_a_udf_after_it_gives_the_same_output():
    ds = sluice.from_source(ListLike(40)).shuffle(seed=9).map(_tag).batch(8)
    same(list(ds.iter(seed=0, epoch=0, processes=2)), list(ds.iter(seed=0, epoch=0)))


def test_pickled_dataset_carries_the_object():
    ds = sluice.from_source(MapStyle(12)).shuffle(seed=1).batch(5)
    copy = pickle.loads(pickle.dumps(ds))
    same(list(copy.iter(seed=0, epoch=0)), list(ds.iter(seed=0, epoch=0)))
    it = ds.iter(seed=0, epoch=0)
    first = next(it)
    rest = list(pickle.loads(pickle.dumps(it)))
    same([first] + rest, list(ds.iter(seed=0, epoch=0)))


class Boom(ListLike):
    def __getitem__(self, i):
        if i == 13:
            raise KeyError("no thirteen")
        return super().__getitem__(i)


@pytest.mark.parametrize("threads", [0, 2])
def test_getitem_error_names_the_index_and_the_source(threads):
    got = []
    with pytest.raises(sluice.PipelineError, match=r"from_source\(Boom\)\[13\] raised KeyError") as e:
        for s in sluice.from_source(Boom(20)).iter(num_threads=threads):
            got.append(s["item"])
    assert got == [3 * i for i in range(13)]  # everything before it, in order
    assert isinstance(e.value.__cause__, KeyError)


class Slow(ListLike):
    def __getitem__(self, i):
        time.sleep(0.002)
        return super().__getitem__(i)


@pytest.mark.parametrize("threads", [0, 2])
def test_breaking_out_stops_the_reads(threads):
    obj = Slow(100_000)
    for s in sluice.from_source(obj).iter(num_threads=threads):
        break
    # Closed: the readers stop (they are not left reading the 100,000 items).
    deadline = time.time() + 60
    while True:
        before = len(obj.reads)
        time.sleep(0.2)
        if len(obj.reads) == before or time.time() > deadline:
            break
    assert len(obj.reads) < 100_000


class NoLen:
    def __getitem__(self, i):
        return i


class NoGetItem:
    def __len__(self):
        return 3


class BadLen(ListLike):
    def __init__(self, n):
        super().__init__(0)
        self.bad = n

    def __len__(self):
        return self.bad


def test_bad_objects_raise_naming_what_is_wrong():
    with pytest.raises(TypeError, match=r"from_source.*NoLen has no __len__"):
        sluice.from_source(NoLen())
    with pytest.raises(TypeError, match=r"NoGetItem has no __getitem__"):
        sluice.from_source(NoGetItem())
    with pytest.raises(TypeError, match=r"__len__ or __getitem__"):
        sluice.from_source(42)
    with pytest.raises(TypeError, match=r"from_source: len\(\) of BadLen must be an int, got str"):
        sluice.from_source(BadLen("3"))
    with pytest.raises(TypeError, match=r"from_source: len\(\) .* got float"):
        sluice.from_source(BadLen(3.0))
    with pytest.raises(ValueError, match=r"from_source: len\(\) of BadLen must be >= 0, got -1"):
        sluice.from_source(BadLen(-1))
    with pytest.raises(TypeError, match="field"):
        sluice.from_source(ListLike(2), field="")


def test_unconvertible_item_names_the_index():
    class Objs(ListLike):
        def __getitem__(self, i):
            return object() if i == 2 else i

    with pytest.raises(TypeError, match=r"from_source\(.*Objs\)\[2\].*cannot convert"):
        list(sluice.from_source(Objs(4)))


# from_generator ---------------------------------------------------------------------------
def counting_gen(n, calls):
    def gen():
        calls.append(1)
        for i in range(n):
            yield {"x": i} if i % 2 else i

    return gen


def test_generator_reads_and_reruns_each_epoch():
    calls = []
    ds = sluice.from_generator(counting_gen(5, calls))
    assert [s.get("x", s.get("item")) for s in ds] == [0, 1, 2, 3, 4]
    assert [s.get("x", s.get("item")) for s in ds] == [0, 1, 2, 3, 4]
    assert len(calls) == 2
    assert list(sluice.from_generator(lambda: iter("ab"), field="c")) == [{"c": "a"}, {"c": "b"}]
    assert [s["item"] for s in sluice.from_generator(lambda: range(3)).repeat(2)] == [0, 1, 2] * 2


@pytest.mark.parametrize("threads", [0, 2])
def test_generator_resume_reruns_and_skips(threads):
    calls = []
    ds = sluice.from_generator(counting_gen(23, calls)).map(lambda s: {"v": s.get("x", s.get("item"))}).batch(4)
    full = [b["v"].tolist() for b in ds.iter(seed=0, epoch=0)]
    it = ds.iter(seed=0, epoch=0, num_threads=threads)
    head = [next(it)["v"].tolist() for _ in range(2)]
    state = it.state_dict()
    calls.clear()
    fresh = ds.iter(seed=0, num_threads=threads)
    fresh.load_state_dict(state)
    assert head + [b["v"].tolist() for b in fresh] == full
    assert calls  # the generator ran again from the start, its first 8 items skipped


def test_generator_shuffle_names_shuffle_buffer_which_works():
    ds = sluice.from_generator(lambda: range(50))
    with pytest.raises(ValueError, match="shuffle_buffer"):
        ds.shuffle(seed=0)
    a = [s["item"] for s in ds.shuffle_buffer(8, seed=1).iter(seed=0, epoch=0)]
    b = [s["item"] for s in ds.shuffle_buffer(8, seed=1).iter(seed=0, epoch=0, num_threads=2)]
    assert a == b and sorted(a) == list(range(50)) and a != list(range(50))


def test_generator_errors_name_the_source():
    def bad():
        yield 1
        raise RuntimeError("broke")

    got = []
    with pytest.raises(sluice.PipelineError, match=r"from_generator\(.*bad\) item 1 raised RuntimeError: broke") as e:
        for s in sluice.from_generator(bad):
            got.append(s["item"])
    assert got == [1]
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(sluice.PipelineError, match=r"from_generator\(.*\): fn\(\) raised ZeroDivisionError"):
        list(sluice.from_generator(lambda: 1 / 0))
    with pytest.raises(TypeError, match=r"from_generator\(.*\): fn\(\) must return an iterable, got int"):
        list(sluice.from_generator(lambda: 5))
    with pytest.raises(TypeError, match="not a generator"):
        sluice.from_generator(iter([1, 2]))


def test_generator_dataset_pickles():
    ds = sluice.from_generator(lambda: ({"x": i * i} for i in range(4))).batch(2)
    assert [b["x"].tolist() for b in pickle.loads(pickle.dumps(ds))] == [[0, 1], [4, 9]]


# from_huggingface -------------------------------------------------------------------------
def test_from_huggingface_reads_the_arrow_table():
    datasets = pytest.importorskip("datasets")
    if not hasattr(datasets, "Dataset"):  # benchmarks/datasets/, a namespace package, not HF's
        pytest.skip("Hugging Face datasets is not installed")
    hf = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(10)], "label": list(range(10))})
    assert sluice.from_huggingface(hf).take(2) == [{"text": "t0", "label": 0}, {"text": "t1", "label": 1}]
    picked = hf.select([7, 2])
    assert [s["label"] for s in sluice.from_huggingface(picked)] == [7, 2]
    assert sorted(s["label"] for s in sluice.from_huggingface(hf).shuffle(seed=0)) == list(range(10))


def test_from_huggingface_refuses_other_objects():
    with pytest.raises(TypeError, match="from_huggingface needs a datasets.Dataset"):
        sluice.from_huggingface([1, 2])
