"""Granularities as policies: what a unit is, whether a batch deals its records, how batches group
into read steps. The one place that knows the granularities by name.

A :class:`Policy` answers every question the planner, the walker and the pipeline ask about a
granularity; :data:`POLICIES` (a plain dict) is the registry. Read steps come in three shapes
(:data:`STEP_SHAPES`): ``batch`` (one step per batch), ``batches`` (K consecutive batches per step,
K from the bytes a step should hold) and ``window`` (a window of random units per step, its records
dealt over the batches it feeds). Adding a granularity is one entry here and its tests; a new step
shape is one step source in :mod:`lirs.walker` as well.
"""
from __future__ import annotations

from dataclasses import dataclass

from .constants import BLOCK, POOL_ALONE_MIN_CORES, RING_MAX_BYTES, STEP_MIN_BYTES, WINDOW_THIRD_MIN_CORES, WINDOWS_IN_FLIGHT, WINDOWS_IN_FLIGHT_AHEAD
from .windows import group_span, held_bytes

STEP_SHAPES = ("batch", "batches", "window")
UNIT_KINDS = ("record", "block", "group")


@dataclass(frozen=True)
class Policy:
    """How one granularity plans: ``unit`` is ``"record"`` (every record a unit), ``"block"`` (the
    records starting in one aligned block) or ``"group"`` (in one aligned span of ``group_bytes``);
    ``deals_batch``: a batch's records come in a random order (units otherwise keep their records
    together); ``steps``: the shape of its read steps (:data:`STEP_SHAPES`)."""

    name: str
    unit: str
    deals_batch: bool
    steps: str
    summary: str
    randomness: int = 0  # rank by how close to uniform its batches are (0: the most random)

    def unit_bytes(self, group_bytes: int, block: int = BLOCK) -> int:
        """Bytes of the aligned span that defines a unit (0: every record is its own unit)."""
        return {"record": 0, "block": int(block), "group": int(group_bytes)}[self.unit]

    @property
    def uses_group_bytes(self) -> bool:
        return self.unit == "group"

    @property
    def uses_window(self) -> bool:
        return self.steps == "window"

    @property
    def unused_settings(self) -> tuple:
        """The Loader settings this granularity's plan does not depend on (a group epoch's batches are the
        same whatever its window): a saved state need not match them to resume."""
        return tuple(k for k, used in (("group_bytes", self.uses_group_bytes), ("window", self.uses_window))
                     if not used)

    @property
    def consumer_helps(self) -> bool:
        """Whether a consumer waiting for a batch runs queued read steps itself (lirs.pipeline). Not
        windows: a window is decoded by the cores but one at once and feeds many batches, and a consumer
        reading the next one while the current one is decoded would hold back the current one's."""
        return self.steps != "window"

    def batches_per_step(self, plan) -> int:
        """Consecutive batches one read step covers (1 unless the steps are ``batches``): enough for
        STEP_MIN_BYTES by the dataset's mean record size, at least one. Record units only where the
        reads are copies (``plan.align`` 1: a step reads its records' bytes alone); with O_DIRECT
        each record reads a whole block, and a batch is a step of its own (the paper's baseline)."""
        if self.steps != "batches" or (self.unit == "record" and plan.align > 1):
            return 1
        return _step_batches(plan)

    def batches_per_unit(self, plan) -> int:
        """Consecutive batches the consumer takes together as one item (a
        :class:`~lirs.steps.SharedStep`): a step's batches (:meth:`batches_per_step`); for window
        steps, batches of one window step, as many as STEP_MIN_BYTES holds (a window feeds
        hundreds: taken a few at a time, what the consumer holds ready stays a step's worth)."""
        return _step_batches(plan) if self.uses_window else self.batches_per_step(plan)

    def steps_in_flight(self, plan, prefetch: int, workers: int = 0, windows: int = WINDOWS_IN_FLIGHT) -> int:
        """Read steps an epoch keeps in flight: ``prefetch + 1`` (one per batch); when a step feeds
        several batches, the steps that ``prefetch + 1`` batches span or one per thread of a pool of
        ``workers``, and the one being consumed; for window steps ``windows`` windows (see
        :func:`windows_in_flight`), or the windows that ``prefetch + 1`` batches span if more."""
        if self.steps == "window":
            # a group of records larger than group_bytes holds one of them (group_span's bytes)
            window_bytes = plan.window * group_span(plan.group_bytes, plan.index.payload_bytes, plan.index.n)
            return max(int(windows), -(-int((prefetch + 1) * batch_bytes(plan)) // window_bytes) + 1)
        per = self.batches_per_step(plan)
        return prefetch + 1 if per == 1 else max(-(-(prefetch + 1) // per), int(workers)) + 1


POLICIES: dict[str, Policy] = {
    # most random first
    "instance": Policy("instance", "record", False, "batches",
                       "every record a unit: the most random, one small read each (the LIRS paper's Fig. 6a)", 0),
    "page": Policy("page", "block", True, "batch",
                   "the records starting in one 4 KiB page (Fig. 6b): about 2x read amplification on small records", 2),
    "group": Policy("group", "group", True, "batches",
                    "the records starting in one aligned span of group_bytes; consecutive batches share a read step", 3),
    "window": Policy("window", "group", True, "window",
                     "groups read a window at a time, their records dealt randomly over the batches the window feeds", 1),
}
GRANULARITIES = tuple(POLICIES)
# most random first: instance, then window (its batches close to uniform), page, group
RANDOMNESS_ORDER = tuple(sorted(POLICIES, key=lambda g: POLICIES[g].randomness))
DEFAULT_GRANULARITY = "window"


def _step_batches(plan) -> int:
    """Batches whose bytes fill STEP_MIN_BYTES in ``plan`` (by the dataset's mean record size), at
    least one, at most the epoch's; fewer where their records are tiny (a step's arrays cost per
    record: :func:`lirs.windows.held_bytes`; 4096 batches of 1-byte records held a GB a group epoch)."""
    nbytes = held_bytes(STEP_MIN_BYTES, plan.index.payload_bytes, plan.index.n)
    return max(1, min(plan.num_batches, -int(-nbytes // max(batch_bytes(plan), 1.0))))


def batch_bytes(plan) -> float:
    """A batch's mean bytes in ``plan``: its batch size times the dataset's mean record size."""
    index = plan.index
    return plan.batch_size * index.payload_bytes / max(int(index.n), 1)


def policy(granularity: str) -> Policy:
    """The policy of ``granularity`` (KeyError for an unknown one: check names with
    :func:`lirs.plan.check_args`)."""
    return POLICIES[granularity]


def steps_in_flight(plan, prefetch: int, workers: int = 0, windows: int = WINDOWS_IN_FLIGHT) -> int:
    """:meth:`Policy.steps_in_flight` of ``plan``'s granularity."""
    return POLICIES[plan.granularity].steps_in_flight(plan, prefetch, workers, windows)


def windows_in_flight(direct: bool, cores: int) -> int:
    """Window steps an epoch keeps in flight (:data:`lirs.constants.WINDOWS_IN_FLIGHT`): three where
    the reads wait for a device (``direct``) or on ``WINDOW_THIRD_MIN_CORES`` cores or more (the
    window after the next one is read while the next one is decoded), else two."""
    many = bool(direct) or int(cores) >= WINDOW_THIRD_MIN_CORES
    return WINDOWS_IN_FLIGHT_AHEAD if many else WINDOWS_IN_FLIGHT


def pool_alone(direct: bool, cores: int) -> bool:
    """Whether the pool's threads run every read step and a waiting consumer only waits: where the
    reads wait for a device (``direct``: the consumer would stop handing out batches while it read
    one) or on ``POOL_ALONE_MIN_CORES`` usable cores or more (the consumer's own Python sets the
    rate there; see :data:`lirs.constants.POOL_ALONE_MIN_CORES`)."""
    return bool(direct) or int(cores) >= POOL_ALONE_MIN_CORES


def walk_extents(granularity: str, direct: bool, cores: int) -> bool | str:
    """The ``extents`` an epoch's walk plans its steps with (:meth:`lirs.plan.EpochPlan.batches`):
    ``"defer"`` (a batch step's extents are found by the thread that reads it), but for group steps
    read by copies on ``POOL_ALONE_MIN_CORES`` cores or more True: found by the planning thread in
    one short pass (a group step's records lie in few runs), sparing the pool's threads the GIL
    hand-offs of finding them. Instance steps keep deferring: an extent a record made the one
    planning thread the limit."""
    many = not direct and pool_alone(False, cores)
    return True if many and POLICIES[granularity].unit == "group" else "defer"


def plans_ahead(plan, units: bool = False) -> int:
    """Batch plans an epoch keeps ready ahead of its consumer (0: the planner's default): for window
    steps, the batches one window feeds, which the consumer takes at once to hand out the window
    after (see :data:`lirs.constants.PLAN_AHEAD_MAX_BATCHES`); with ``units`` (a walk in
    :class:`~lirs.steps.SharedStep` items) the items those batches come in: their units
    (:meth:`Policy.batches_per_unit` batches each) and one more at each end."""
    pol = POLICIES[plan.granularity]
    if not pol.uses_window:
        return 0
    n = -int(-plan.window * plan.group_bytes // max(batch_bytes(plan), 1.0))
    return -(-n // pol.batches_per_unit(plan)) + 2 if units else n


def ring_slots(plan, workers: int, prefetch: int, slot_bytes: int, bundle_batches: int, by_window: bool,
               max_bytes: int = RING_MAX_BYTES) -> int:
    """Slots for each of ``workers`` DataLoader workers in their ring (:class:`lirs.ring.SlotRing`,
    ``slot_bytes`` each): the items torch keeps asked of a worker (``prefetch``) and two more. With
    ``by_window`` (each worker reads whole windows of ``plan``) also one window's items: torch takes
    the workers' items in turn while the main process hands out one worker's window, so it holds the
    others' next windows, each item in a slot (an item finding none crossed as a shared-memory
    segment of its own, made and faulted in afresh: ad hoc, window epochs with 4 workers on 2 cores and
    50 MB windows sent 27 of 66 items so; ``benchmarks/results/torch_window_ring_ab.json`` for the rates). A window's items: its batches (:func:`plans_ahead`) ``bundle_batches`` an
    item, and the smaller items a worker's pass starts with. At most ``max_bytes`` in all (default
    ``RING_MAX_BYTES``), never fewer than the items asked."""
    base = int(prefetch) + 2
    if not by_window or workers <= 1 or not POLICIES[plan.granularity].uses_window:
        return base
    per = max(1, int(bundle_batches))
    items = -(-plans_ahead(plan) // per) + per.bit_length() - 1  # a pass's items start at 1, 2, 4, ... batches
    return max(base, min(base + items, int(max_bytes) // max(1, int(workers) * int(slot_bytes))))
