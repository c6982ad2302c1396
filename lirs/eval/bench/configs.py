"""What ``lirs bench`` measures: the configurations (:class:`Config`), the group size an envelope
asks for, and the fio figure that bounds each result row (:func:`add_ratios`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ...windows import group_span, window_groups
from ..fio import IOPS_QDS, figure
from ..peers import BOUNDS
from ...policies import POLICIES

MIN_AUTO_GROUP = 65536
DEVICES = ("nvme", "ssd", "hdd")  # the device envelopes of lirs.eval.envelope, fastest first


def format_size(b: int) -> str:
    """65536 -> '64K', 1048576 -> '1M', 1000 -> '1000'."""
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k}{unit}"
    return str(b)


@dataclass(frozen=True)
class Config:
    """One measured configuration: a lirs granularity (``kind="lirs"``) or a peer."""

    kind: str
    granularity: str | None = None
    group_bytes: int | None = None
    window: int | None = None
    peer: str | None = None
    reads_only: bool = False  # lirs: the plan's extents read with the engine, no decode, no Loader

    @property
    def name(self) -> str:
        if self.kind == "peer":
            return self.peer
        pol = POLICIES[self.granularity]
        if not pol.uses_group_bytes:
            name = f"lirs-{self.granularity}"
        elif not pol.uses_window:
            name = f"lirs-group-{format_size(self.group_bytes)}"
        else:
            name = f"lirs-window-{format_size(self.group_bytes)}x{self.window}"
        return name + ("/reads" if self.reads_only else "")

    def as_dict(self) -> dict:
        return asdict(self)


def envelope_group_bytes(fio: dict | None, minimum: int = MIN_AUTO_GROUP, maximum: int = 16 << 20) -> int | None:
    """The group size an envelope asks for: the smallest power of two >= ``minimum`` at which fio's
    4 KiB random IOPS (QD 128) times the group size reaches fio's sequential bandwidth, i.e. group
    reads stop being IOPS-bound. None without fio figures."""
    iops = figure(fio, "rand4k_qd128", "iops")
    bw = figure(fio, "seq1m_qd16", "bw_bytes")
    if not iops or not bw:
        return None
    g = minimum
    while g * iops < bw and g < maximum:
        g *= 2
    return g


def lirs_configs(granularities, group_sizes, window, reads_only=(), data_bytes: int = 0,
                 records: int = 0) -> list[Config]:
    """Configs of the lirs granularities; group and window once per group size in ``group_sizes``;
    each granularity of ``reads_only`` once more as a reads-only run (its first group size).
    ``window`` is a Loader window spec (group count, ``"64M"``, ``"5%"`` of ``data_bytes``); a
    config holds its group count, a group counted as the Loader counts it (of ``records`` records:
    :func:`lirs.windows.group_span`)."""
    def groups(gb):
        return window_groups(window, group_span(int(gb), data_bytes, records), data_bytes, records)

    out = []
    for g in granularities:
        if not POLICIES[g].uses_group_bytes:
            out.append(Config("lirs", g))
        else:
            for gb in group_sizes:
                out.append(Config("lirs", g, int(gb), groups(gb) if POLICIES[g].uses_window else None))
    for g in reads_only:
        gb = None if not POLICIES[g].uses_group_bytes else int(group_sizes[0])
        out.append(Config("lirs", g, gb, groups(gb) if POLICIES[g].uses_window else None, reads_only=True))
    seen, uniq = set(), []
    for c in out:
        if c.name not in seen:
            seen.add(c.name)
            uniq.append(c)
    return uniq


def bound_of(row: dict) -> tuple[str, str] | None:
    """(``"iops"`` or ``"bw"``, fio job) that bounds a result row, or None.

    instance/page: 4 KiB random reads at the largest measured queue depth not above the engine's
    depth; group/window: bandwidth, 64 KiB random reads for groups up to 64 KiB, sequential
    reads for larger groups;
    peers: :data:`lirs.eval.peers.BOUNDS`, except that buffered random readers whose mean device read
    reached 64 KiB (readahead) are bound by sequential bandwidth.
    """
    if row["kind"] == "peer":
        b = BOUNDS.get(row["peer"])
        if b is not None and b[0] == "iops" and (row.get("mean_read_bytes") or 0) >= (64 << 10):
            # page-cache readahead turned the random reads into large ones: bandwidth bounds them
            return "bw", "seq1m_qd16"
        return b
    if not POLICIES[row["granularity"]].uses_group_bytes:
        depth = row.get("engine_depth") or 128
        qd = max((q for q in IOPS_QDS if q <= depth), default=1)
        return "iops", IOPS_QDS[qd]
    return "bw", ("rand64k_qd32" if (row.get("group_bytes") or 65536) <= 65536 else "seq1m_qd16")


def add_ratios(row: dict, fio: dict | None) -> None:
    """Fill ``bound`` and ``ratios`` of a row from the envelope's fio figures (in place)."""
    b = bound_of(row) if row.get("status") == "ok" else None
    row["bound"] = None
    row["ratio"] = None
    row["ratios"] = {}
    if b is None:
        return
    metric, job = b
    iops = figure(fio, job, "iops")
    bw = figure(fio, job, "bw_bytes")
    row["bound"] = {"metric": metric, "fio_job": job, "fio_iops": iops, "fio_bw_bytes": bw}
    if not iops or not bw:
        return
    r = {}
    if row.get("reads_per_s") is not None:
        r["reads_per_s"] = row["reads_per_s"] / iops
    if row.get("mb_per_s") is not None:
        r["mb_per_s"] = row["mb_per_s"] * 1e6 / bw
    if row.get("records_per_s") is not None:
        if metric == "iops":
            r["records_per_s"] = row["records_per_s"] / iops
        elif row.get("payload_per_s") is not None:
            r["records_per_s"] = row["payload_per_s"] / bw  # payload delivered vs what the device streams
    row["ratios"] = r
    row["ratio"] = r.get("reads_per_s" if metric == "iops" else "mb_per_s")



def bench_configs(granularities, sizes, window, peer_list, fres, reads_only=(), data_bytes: int = 0,
                  records: int = 0) -> list[Config]:
    gs = []
    for s in sizes:
        if s == "auto":
            g = envelope_group_bytes(fres)
            if g is not None:
                gs.append(g)
        else:
            gs.append(s)
    if not gs:
        gs = [65536]
    return lirs_configs(granularities, gs, window, reads_only, data_bytes, records) + \
        [Config("peer", peer=p) for p in peer_list]
