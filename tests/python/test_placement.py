"""Pecan's AutoPlacement state machine (sluice.placement) on fake measurements: no cluster."""

import pytest

from sluice.placement import SCALE_REMOTE, STABLE, AutoPlacement


def run(p, rate_of, windows=40, noise=None):
    """Feeds ``p`` the rate ``rate_of(local, remote)`` of its current placement each window."""
    for w in range(windows):
        r = rate_of(p.local, p.remote)
        if noise is not None:
            r *= noise(w)
        p.observe(r)
    return p


def cluster(per_actor=100.0, per_local=90.0, good_local=2, cap=450.0):
    """Actors add ``per_actor`` each, local workers ``per_local`` up to ``good_local`` (more
    steal the trainer's CPU: -15% each), the consumer takes at most ``cap``."""

    def rate(local, remote):
        r = per_actor * remote + per_local * min(local, good_local)
        if local > good_local:
            r *= 0.85 ** (local - good_local)
        return min(r, cap)

    return rate


def test_pecan_order_scale_remote_then_shift_to_free_local_then_drop_remote():
    p = run(AutoPlacement(local=0, remote=1, max_local=4, max_remote=8), cluster())
    states = [d.state for d in p.decisions]
    assert states[0] == SCALE_REMOTE and p.state == STABLE
    # Scale-out found the consumer's cap (5 actors; the 6th gained nothing and went)...
    assert any("removed again" in d.reason for d in p.decisions)
    # ...then free local workers took over part of the work and actors were given back,
    # while staying within 10% of the best rate.
    assert p.local >= 2 and p.remote < 5
    assert cluster()(p.local, p.remote) >= 0.9 * 450
    assert p.cost_per_hour() < 5 * p.remote_cpu_price
    # Every decision carries its reason, the rate that led to it and the resulting cost.
    for d in p.decisions:
        assert d.reason and d.rate > 0 and d.cost_per_hour >= 0
        assert d.local_workers >= 0 and d.remote_actors >= 0


def test_noise_within_the_margins_does_not_move_a_stable_placement():
    p = run(AutoPlacement(local=0, remote=1, max_local=4, max_remote=8), cluster())
    settled = (p.local, p.remote, len(p.decisions))
    # +-6% noise: inside the 10% band, so nothing changes (hysteresis).
    run(p, cluster(), windows=30, noise=lambda w: 1.06 if w % 2 else 0.94)
    assert (p.local, p.remote, len(p.decisions)) == settled


def test_a_lasting_change_restarts_the_search():
    p = run(AutoPlacement(local=0, remote=1, max_local=4, max_remote=8), cluster())
    n = len(p.decisions)
    # The workload gets twice as expensive: every worker does half as much.
    run(p, cluster(per_actor=50.0, per_local=45.0), windows=3)
    assert any("re-placing" in d.reason for d in p.decisions[n:]), p.decisions[n:]


def test_a_target_stops_scaling_and_bounds_the_cost_phases():
    p = run(AutoPlacement(local=0, remote=1, max_local=4, max_remote=8, target=250.0, slack=0.05), cluster())
    assert any("meets the target" in d.reason for d in p.decisions)
    # Never more actors than the target needs, and the final rate still meets it (- slack).
    assert max(d.remote_actors for d in p.decisions) <= 3
    assert cluster()(p.local, p.remote) >= 250.0 * 0.95


def test_when_local_cpus_cost_more_the_roles_swap():
    # The trainer's host is dear: start with 2 local workers, remote actors are cheap.
    p = run(
        AutoPlacement(local=2, remote=1, max_local=2, max_remote=8, local_cpu_price=1.0, remote_cpu_price=0.05),
        cluster(),
    )
    assert p.cheap == "remote"
    assert any(d.state == "decrease_local" for d in p.decisions), [d.state for d in p.decisions]
    assert p.local < 2
    assert cluster()(p.local, p.remote) >= 0.9 * 450


def test_limits_are_respected_and_something_always_serves():
    p = run(AutoPlacement(local=1, remote=0, max_local=1, min_remote=0, max_remote=0), cluster())
    assert (p.local, p.remote) == (1, 0)
    p = run(AutoPlacement(local=0, remote=1, max_local=0, max_remote=1), lambda l, r: 10.0 * (l + r))
    assert p.local + p.remote >= 1


@pytest.mark.parametrize("rate", [0.0, 1e-12])
def test_a_stalled_stage_is_not_a_crash(rate):
    p = AutoPlacement(local=0, remote=1, max_local=2, max_remote=2)
    for _ in range(6):
        p.observe(rate)
    assert p.local + p.remote >= 1
