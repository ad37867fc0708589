"""Hybrid placement at run time: Pecan's AutoPlacement state machine.

A stage served by local workers (engines in the training process) and remote workers (Ray
actors) at once is re-balanced from measurements: after every window the pool reports the
stage's throughput, and :class:`AutoPlacement` answers with at most one change — one local
worker or one remote actor more or fewer — and the reason. It never touches Ray or threads,
so it is tested with fake measurements (``tests/python/test_placement.py``).

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

import dataclasses
from dataclasses import dataclass, field

#: Pecan's remote worker (GCP n2-standard-8, $0.427/h) per CPU.
DEFAULT_REMOTE_CPU_PRICE = 0.427 / 8

SCALE_REMOTE = "scale_remote"
STABLE = "stable"


@dataclass(frozen=True)
class Decision:
    """One placement change (``local``/``remote``: -1, 0 or +1) and why."""

    local: int
    remote: int
    state: str
    reason: str
    #: Samples/s measured in the window that led to the decision.
    rate: float
    #: Workers after the change, and what they cost per hour.
    local_workers: int
    remote_actors: int
    cost_per_hour: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class AutoPlacement:
    """Pecan's AutoPlacement for one stage: ``observe(rate)`` once per measurement window
    (samples/s with the current workers) returns a :class:`Decision` or None.

    ``target``: samples/s the trainer needs (``None``: as fast as it goes); with a target,
    scaling stops once ``target × (1 + slack)`` is reached and the cost phases keep the rate
    above ``target × (1 - slack)``. ``actor_cpus``: CPUs each actor reserves (billed).
    """

    local: int
    remote: int
    min_local: int = 0
    max_local: int = 0
    min_remote: int = 0
    max_remote: int = 1
    local_cpu_price: float = 0.0
    remote_cpu_price: float = DEFAULT_REMOTE_CPU_PRICE
    actor_cpus: float = 1.0
    target: float | None = None
    slack: float = 0.05
    improve: float = 0.03
    degrade: float = 0.10
    patience: int = 2
    state: str = SCALE_REMOTE
    decisions: list[Decision] = field(default_factory=list)
    # What the last change was, to judge (and maybe undo) it in the next window.
    _pending: tuple[int, int] | None = None
    _last_rate: float | None = None
    _reference: float | None = None
    _added_cheap: bool = False
    _grew_cheap: bool = False
    _removed_costly: bool = False
    _rounds: int = 0
    _off_band: int = 0

    def __post_init__(self) -> None:
        self.max_local = max(self.max_local, self.local)
        self.max_remote = max(self.max_remote, self.remote)
        self.min_local = min(self.min_local, self.local)
        self.min_remote = min(self.min_remote, self.remote)

    # Prices ------------------------------------------------------------------------------
    @property
    def cheap(self) -> str:
        """Which kind of worker is cheaper per CPU: ``"local"`` or ``"remote"``."""
        per_actor = self.remote_cpu_price * max(self.actor_cpus, 1e-9)
        return "local" if self.local_cpu_price <= per_actor else "remote"

    def cost_per_hour(self, local: int | None = None, remote: int | None = None) -> float:
        """$ per hour of ``local`` workers and ``remote`` actors (now, by default)."""
        local = self.local if local is None else local
        remote = self.remote if remote is None else remote
        return local * self.local_cpu_price + remote * self.actor_cpus * self.remote_cpu_price

    # The state machine -------------------------------------------------------------------
    def _increase(self) -> str:
        """The state adding cheap workers (``increase_local`` in Pecan's setting)."""
        return f"increase_{self.cheap}"

    def _decrease(self) -> str:
        """The state removing costly workers (``decrease_remote`` in Pecan's setting)."""
        return "decrease_" + ("remote" if self.cheap == "local" else "local")

    def observe(self, rate: float) -> Decision | None:
        """Takes one window's throughput (samples/s) and returns the change to make, if any."""
        rate = max(float(rate), 1e-9)
        prev, self._last_rate = self._last_rate, rate
        pending, self._pending = self._pending, None
        if self.state == SCALE_REMOTE:
            return self._scale(rate, prev, pending)
        if self.state.startswith("increase_"):
            return self._cost_phase(rate, pending, add=True)
        if self.state.startswith("decrease_"):
            return self._cost_phase(rate, pending, add=False)
        if self.state.startswith("trim_"):
            return self._trim(rate, pending)
        return self._stable(rate)

    def _scale(self, rate: float, prev: float | None, pending: tuple[int, int] | None) -> Decision | None:
        met = self.target is not None and rate >= self.target * (1 + self.slack)
        if pending is None:
            # The first window (or a restart): try one more actor unless already enough.
            self._reference = rate
            if met:
                return self._enter_cost_phases(rate, f"{rate:.1f}/s meets the target {self.target:g}/s")
            if self.remote < self.max_remote:
                return self._change(0, +1, rate, f"first window: {rate:.1f}/s; trying one more actor")
            return self._enter_cost_phases(rate, f"{rate:.1f}/s with all {self.remote} actors")
        gain = (rate - prev) / prev if prev else 0.0
        if gain <= self.improve:
            self._last_rate = prev  # the reference stays the rate before the useless actor
            return self._change(
                0, -1, rate, f"+1 actor gained {gain:+.1%} (<= {self.improve:.0%}): removed again", then=self._next_after_scale()
            )
        self._reference = max(self._reference or 0.0, rate)
        if met:
            return self._enter_cost_phases(rate, f"{gain:+.1%}: {rate:.1f}/s meets the target {self.target:g}/s")
        if self.remote < self.max_remote:
            return self._change(0, +1, rate, f"+1 actor gained {gain:+.1%}: one more")
        return self._enter_cost_phases(rate, f"{gain:+.1%} with the most actors ({self.max_remote})")

    def _next_after_scale(self) -> str:
        self._rounds = 0
        self._added_cheap = self._removed_costly = self._grew_cheap = False
        return self._increase()

    def _enter_cost_phases(self, rate: float, why: str) -> Decision | None:
        self.state = self._next_after_scale()
        self._reference = max(self._reference or 0.0, rate)
        return self._cost_phase(rate, None, add=True, why=why)

    def _floor(self, add: bool) -> float:
        """The lowest acceptable rate in a cost phase: within ``degrade`` of the reference;
        when removing costly workers with a target met, down to ``target × (1 - slack)``."""
        ref = self._reference or 0.0
        floor = ref * (1 - self.degrade)
        if not add and self.target is not None and ref >= self.target:
            floor = min(floor, self.target * (1 - self.slack))
        return floor

    def _steps(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(add a cheap worker, remove a costly one) as (local, remote) changes."""
        if self.cheap == "local":
            return (+1, 0), (0, -1)
        return (0, +1), (-1, 0)

    def _cost_phase(self, rate: float, pending: tuple[int, int] | None, add: bool, why: str = "") -> Decision | None:
        grow, shrink = self._steps()
        step = grow if add else shrink
        if pending is not None:
            floor = self._floor(add)
            if rate < floor:
                reason = f"{rate:.1f}/s is below {floor:.1f}/s after {self._describe(pending)}: undone"
                return self._change(-pending[0], -pending[1], rate, reason, then=self._after_phase(add))
            if add:
                self._added_cheap = self._grew_cheap = True
            else:
                self._removed_costly = True
            if self.target is None:
                self._reference = max(self._reference or 0.0, rate)
        # Cheap workers are added only to replace costly ones that can then go.
        if self._can(step) and (not add or self._can(shrink)):
            kind = "a local worker" if step[0] else "an actor"
            price = self.local_cpu_price if step[0] else self.remote_cpu_price * self.actor_cpus
            verb = "adding" if add else "removing"
            reason = f"{why + '; ' if why else ''}{rate:.1f}/s; {verb} {kind} (${price:.3f}/h)"
            return self._change(*step, rate, reason)
        self.state = self._after_phase(add)
        return self._enter(rate, why)

    def _enter(self, rate: float, why: str) -> Decision | None:
        """Acts at once in the state just entered (one change per window still)."""
        if self.state.startswith("increase_"):
            return self._cost_phase(rate, None, add=True, why=why)
        if self.state.startswith("decrease_"):
            return self._cost_phase(rate, None, add=False, why=why)
        if self.state.startswith("trim_"):
            return self._trim(rate, None, why)
        return self._settle(rate, why)

    def _can(self, step: tuple[int, int]) -> bool:
        local, remote = self.local + step[0], self.remote + step[1]
        return (
            self.min_local <= local <= self.max_local
            and self.min_remote <= remote <= self.max_remote
            and local + remote >= 1
        )

    def _after_phase(self, add: bool) -> str:
        if add:
            # In the alternation round, a phase that could add nothing ends the search.
            if self._rounds and not self._added_cheap:
                return self._final()
            return self._decrease()
        # Alternate once more when both phases moved something (Pecan), then settle.
        self._rounds += 1
        if self._added_cheap and self._removed_costly and self._rounds < 2:
            self._added_cheap = self._removed_costly = False
            return self._increase()
        return self._final()

    def _final(self) -> str:
        # Cheap workers that are not free may have been added beyond need: trim them first.
        cheap_price = self.local_cpu_price if self.cheap == "local" else self.remote_cpu_price
        if self._grew_cheap and cheap_price > 0:
            self._grew_cheap = False
            return f"trim_{self.cheap}"
        return STABLE

    def _trim(self, rate: float, pending: tuple[int, int] | None, why: str = "") -> Decision:
        step = (-1, 0) if self.cheap == "local" else (0, -1)
        floor = self._floor(add=False)
        if pending is not None and rate < floor:
            reason = f"{rate:.1f}/s is below {floor:.1f}/s after {self._describe(pending)}: undone"
            return self._change(-pending[0], -pending[1], rate, reason, then=STABLE)
        if self._can(step):
            kind = "a local worker" if step[0] else "an actor"
            reason = f"{why + '; ' if why else ''}{rate:.1f}/s; trimming {kind} beyond need"
            return self._change(*step, rate, reason)
        return self._settle(rate, why)

    def _settle(self, rate: float, why: str) -> Decision:
        self.state = STABLE
        self._reference = rate
        self._off_band = 0
        done = f"no cheaper placement keeps the rate: stable at {self.local} local + {self.remote} actors"
        return self._record(0, 0, rate, f"{why}; {done}" if why else f"{rate:.1f}/s; {done}")

    def _stable(self, rate: float) -> Decision | None:
        ref = self._reference or rate
        if abs(rate - ref) / ref > self.degrade:
            self._off_band += 1
        else:
            self._off_band = 0
            self._reference = 0.8 * ref + 0.2 * rate  # follow slow drift
        if self._off_band < self.patience:
            return None
        self.state = SCALE_REMOTE
        self._off_band = 0
        self._reference = rate
        why = f"{rate:.1f}/s left the {self.degrade:.0%} band around {ref:.1f}/s for {self.patience} windows: re-placing"
        if self.remote < self.max_remote and (self.target is None or rate < self.target * (1 + self.slack)):
            return self._change(0, +1, rate, why + "; trying one more actor")
        return self._enter_cost_phases(rate, why)

    # Bookkeeping -------------------------------------------------------------------------
    def _describe(self, change: tuple[int, int]) -> str:
        parts = []
        if change[0]:
            parts.append(f"{change[0]:+d} local")
        if change[1]:
            parts.append(f"{change[1]:+d} actor")
        return ", ".join(parts) or "no change"

    def _change(self, dl: int, dr: int, rate: float, reason: str, then: str | None = None) -> Decision:
        self.local += dl
        self.remote += dr
        if then is not None:
            self.state = then
            # An undo is judged like no change: the next window measures the restored setup.
            self._pending = None
            self._off_band = 0
        else:
            self._pending = (dl, dr)
        return self._record(dl, dr, rate, reason)

    def _record(self, dl: int, dr: int, rate: float, reason: str) -> Decision:
        d = Decision(
            local=dl,
            remote=dr,
            state=self.state,
            reason=reason,
            rate=rate,
            local_workers=self.local,
            remote_actors=self.remote,
            cost_per_hour=round(self.cost_per_hour(), 4),
        )
        self.decisions.append(d)
        return d
