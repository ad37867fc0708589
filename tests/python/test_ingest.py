import time

import pytest

import sluice


def test_report_counts_and_delays():
    ds = sluice.range(1000).batch(100)
    r = sluice.check_ingest(ds, epochs=3, verbose=False)
    assert (r["epochs"], r["batches"], r["samples"]) == (3, 30, 3000)
    assert r["bytes"] == 3000 * 8
    assert r["delay_max_ms"] >= r["delay_p95_ms"] >= r["delay_p50_ms"] >= 0
    assert r["peak_memory_mib"] > 0


def test_slow_loader_shows_in_delays_and_fast_consumer_hides_it():
    def slow(s):
        time.sleep(0.002)
        return s

    ds = sluice.range(40).map(slow).batch(10)
    starving = sluice.check_ingest(ds, batches=4, num_threads=1, verbose=False)
    assert starving["delay_p50_ms"] > 5  # ~20 ms of work per batch, nothing prefetched
    fed = sluice.check_ingest(ds, batches=4, num_threads=1, consumer_delay=0.05, verbose=False)
    assert fed["delay_p50_ms"] < starving["delay_p50_ms"]


def test_batches_limit_and_bad_arguments(capsys):
    r = sluice.check_ingest(sluice.range(100).batch(10), batches=3)
    assert r["batches"] == 3 and "batch delay P50" in capsys.readouterr().out
    with pytest.raises(ValueError):
        sluice.check_ingest(sluice.range(3), epochs=0)
    with pytest.raises(ValueError):
        sluice.check_ingest(sluice.range(3), consumer_delay=-1)
