"""Hybrid placement at run time: Pecan's AutoPlacement state machine.

A stage served by local workers (engines in the training process) and remote workers (Ray
actors) at once is re-balanced from measurements: after every window the pool reports the
stage's throughput, and :class:`AutoPlacement` answers with at most one change — one local
worker or one remote actor more or fewer — and the reason. It never touches Ray or threads
(the Ray pool, ``sluice_remote::actor_pool``, applies the decisions), so it is tested with fake
measurements (``tests/python/test_placement.py``). The state machine is the engine's
(``sluice_core::exec::autoplacement``, in Rust); this module names it.

States (Pecan, ``docs/RAY.md``):

- ``scale_remote`` — add a remote actor while the next window's time per sample improves by
  more than ``improve`` (3%) and the target (if any) is not met; an actor that does not pay
  is removed again. The best time reached is the reference from then on.
- ``increase_local`` — add a local worker (the cheaper CPU: already paid for, Pecan's view)
  while the time per sample stays within ``degrade`` (10%) of the reference (or the target
  minus ``slack``); a worker that costs more is removed again.
- ``decrease_remote`` — remove a remote actor while the time per sample stays within those
  bounds; the removal that breaks them is undone. If that phase removed actors and local
  workers were added before it, ``increase_local`` runs once more (the alternation), else
  the placement is ``stable``.
- ``trim_<cheap>`` — only when the cheap workers are not free: remove those added beyond
  need, within the same bounds.
- ``stable`` — hold; when the rate leaves the band (``degrade``) for ``patience`` windows in
  a row, the workload changed: start over at ``scale_remote``.

When a local CPU costs more than a remote one (``local_cpu_price`` > ``remote_cpu_price`` ×
``actor_cpus``), the roles swap: remote actors are added in the cheap phase and local
workers removed in the costly one. Every change needs a settled window after it (a new
actor starts up first); so one change at most per window: hysteresis by construction.

>>> p = AutoPlacement(local=0, remote=1, max_local=2, max_remote=3)
>>> p.observe(100.0).reason
'first window: 100.0/s; trying one more actor'
>>> (p.local, p.remote, p.state)
(0, 2, 'scale_remote')
"""

from __future__ import annotations

from ._native import DEFAULT_REMOTE_CPU_PRICE, SCALE_REMOTE, STABLE, AutoPlacement, Decision

__all__ = ["DEFAULT_REMOTE_CPU_PRICE", "SCALE_REMOTE", "STABLE", "AutoPlacement", "Decision"]
