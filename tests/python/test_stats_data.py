"""Statistics as data (``to_dict``, ``series``, ``to_pandas``) and live metrics (a Prometheus
endpoint on loopback, a periodic callback). Nothing here asserts on timings: only on the
structure and on counts the pipeline fixes."""

import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

import sluice


def slow(sample):
    time.sleep(0.002)  # long enough for the series to take several samples
    return sample


def run(n=300):
    ds = sluice.range(n).map(slow).batch(5)
    assert len(list(ds.iter(num_threads=2))) == n // 5
    return ds.stats()


def test_to_dict_is_json_and_the_series_covers_the_run():
    st = run()
    data = json.loads(json.dumps(st.to_dict()))
    assert data["consumer"]["outputs"] == 60 and data["consumer"]["samples"] == 300
    points = data["series"]
    assert 2 <= len(points) <= 513
    assert all(a["t_s"] <= b["t_s"] for a, b in zip(points, points[1:]))
    assert points[-1]["outputs"] == 60 and points[-1]["stages"][-1]["out"] == 60
    ser = st.series
    n = len(ser["t_s"])
    assert n >= 1 and all(len(ser[k]) == n for k in ("outputs_per_s", "samples_per_s", "cpu_cores", "rss_bytes"))
    assert list(ser["stages"]) == [s["name"] for s in st.stages]
    for per in ser["stages"].values():
        assert all(len(v) == n for v in per.values())
        assert all(x >= 0 for x in per["throughput"]) and all(0 <= x for x in per["busy"])
    assert all(c is None or c >= 0 for c in ser["cpu_cores"])
    assert all(r is None or r > 1 << 20 for r in ser["rss_bytes"])


def test_to_pandas_stages_and_series():
    pd = pytest.importorskip("pandas")
    st = run(100)
    frame = st.to_pandas()
    assert isinstance(frame, pd.DataFrame) and list(frame.index) == [s["name"] for s in st.stages]
    assert frame.loc[st.stages[-1]["name"], "samples_out"] == 20
    series = st.to_pandas("series")
    assert list(series.columns) == ["t_s", "stage", "throughput", "busy", "queue", "cpu_cores", "rss_bytes"]
    assert len(series) == len(st.series["t_s"]) * len(st.stages)
    with pytest.raises(ValueError, match="'stages' or 'series'"):
        st.to_pandas("rows")
    assert str(st).startswith("stage")  # the table is still the text


def scrape(address, path="/metrics"):
    host, port = address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


SAMPLE = re.compile(r'^[a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+$')


def test_prometheus_endpoint_serves_the_live_figures_on_loopback_and_stops_with_the_run():
    it = sluice.range(50).map(slow).batch(5).iter(stats_port=0)
    for _ in range(3):
        next(it)
    host, port = it.stats_address
    assert host == "127.0.0.1" and port > 0
    kind, text = scrape(it.stats_address)
    assert kind.startswith("text/plain; version=0.0.4")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines and all(SAMPLE.match(ln) for ln in lines), [ln for ln in lines if not SAMPLE.match(ln)]
    assert "sluice_consumer_outputs_total 3" in lines
    assert any(ln.startswith('sluice_stage_samples_out_total{stage="slow"}') for ln in lines)
    assert '# TYPE sluice_batch_delay_seconds summary' in text
    with pytest.raises(urllib.error.HTTPError, match="404"):
        scrape(it.stats_address, "/other")
    rest = list(it)  # the loop ends the run, and the endpoint with it
    assert len(rest) == 7
    with pytest.raises(OSError):
        scrape((host, port))


def test_the_endpoint_follows_a_loaded_checkpoint_and_the_text_is_there_without_it():
    from sluice import metrics

    with sluice.range(100).batch(10).iter(stats_port=0) as it:
        for _ in range(3):
            next(it)
        assert "sluice_consumer_outputs_total 3" in scrape(it.stats_address)[1].splitlines()
        state = it.state_dict()
        it.load_state_dict(state)  # a new run from the checkpoint: its figures are served
        next(it)
        assert "sluice_consumer_outputs_total 1" in scrape(it.stats_address)[1].splitlines()
        assert "sluice_consumer_outputs_total 1" in metrics.prometheus_text(it).splitlines()


def test_a_taken_port_is_an_error_and_leaves_nothing_running():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            sluice.range(10).iter(stats_port=s.getsockname()[1])


def test_on_stats_is_called_periodically_and_stops_with_the_run(caplog):
    calls = []
    done = threading.Event()

    def on_stats(st):
        calls.append(st.consumer["outputs"])
        if len(calls) == 2:
            raise RuntimeError("dashboard bug")  # logged, not fatal
        if len(calls) >= 3:
            done.set()

    it = sluice.range(10**6).map(slow).batch(5).iter(on_stats=on_stats, stats_interval=0.05)
    with caplog.at_level(logging.ERROR, logger="sluice"):
        while not done.is_set():
            next(it)
            if len(calls) > 50:  # pragma: no cover - a hang guard, never a timing assertion
                break
        it.close()
    assert len(calls) >= 3 and all(isinstance(c, int) for c in calls)
    assert "on_stats callback failed" in caplog.text
    after = len(calls)
    time.sleep(0.3)
    assert len(calls) == after, "no calls after the run was closed"


def test_bad_live_arguments():
    ds = sluice.range(3)
    with pytest.raises(ValueError, match="stats_interval"):
        ds.iter(on_stats=print, stats_interval=0)
    with pytest.raises(TypeError, match="on_stats must be callable"):
        ds.iter(on_stats=3)
    with pytest.raises(ValueError, match="stats_port must be <= 65535"):
        ds.iter(stats_port=70000)
    with pytest.raises(ValueError, match="stats_port must be >= 0"):
        ds.iter(stats_port=-1)


def test_the_sources_queue_holds_two_chunks_for_each_worker_of_the_stage_it_feeds():
    # 16 workers draining a queue of 4 chunks idled whenever the source thread waited for a
    # core (docs/BENCHMARKS.md, "The many-core curve"): it now holds at least two each.
    for threads, want in ((16, 32), (2, 4)):
        it = sluice.range(100).map(lambda x: x).iter(num_threads=threads)
        assert len(list(it)) == 100
        assert it.stats().stages[0]["queue_capacity"] == want
