"""Exactly-once under SIGKILL: the harness of benchmarks/faults.py on a small epoch (the
full table in docs/RELIABILITY.md comes from that script)."""

import random
import sys

from procs import ROOT_DIR

sys.path.insert(0, str(ROOT_DIR / "benchmarks"))
import faults  # noqa: E402


def test_sigkilled_trainers_resume_exactly_once():
    case = {"threads": 2, "n": 600, "seed": 1}
    r = faults.preempted(case, kills=2, rng=random.Random(0))
    assert r["kills"] == 2, r
    assert (r["lost"], r["duplicated"], r["identical"]) == (0, 0, True), r
    assert r["delivered"] == r["samples"] > 0


def test_the_check_sees_a_resume_that_ignores_the_checkpoint():
    case = {"threads": 2, "n": 600, "seed": 1}
    r = faults.preempted(case, kills=1, rng=random.Random(0), resume=False)
    assert r["duplicated"] > 0 and not r["identical"], r


def test_an_elastic_resume_after_sigkill_covers_every_sample_once():
    r = faults.elastic({"threads": 1, "n": 600, "seed": 2}, random.Random(0))
    assert (r["lost"], r["duplicated"], r["identical"]) == (0, 0, True), r
