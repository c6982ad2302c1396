"""The recommendation rule of ``lirs bench`` (:func:`recommend`) and the project's goals for it (:func:`goals`)."""
from __future__ import annotations

from ...policies import POLICIES, RANDOMNESS_ORDER  # noqa: F401 - RANDOMNESS_ORDER: the tie-break, public here
from ..peers import CAVEATS
from .report import fmt_s

TIE_TOLERANCE = 0.05

GOALS = {
    "instance_vs_fio_iops": 0.9,
    "group_vs_fio_bandwidth": 0.85,
    "group_window_vs_torch": 10.0,
}



def _randomness_key(row: dict):
    g = row["granularity"]
    return (RANDOMNESS_ORDER.index(g), row.get("group_bytes") or 0, -(row.get("window") or 0))


def recommend(rows: list[dict], *, tolerance: float = TIE_TOLERANCE, epochs: int = 1) -> dict:
    """Per device, the lirs configuration to use.

    Rule: among the lirs rows of a device that ran (status ``ok``), take those whose epoch time is
    within ``tolerance`` (5%) of the fastest; of these, the most random one wins: instance, then
    window, then page, then group; smaller groups before larger ones, more groups per window
    before fewer. Peers are not candidates (a Loader cannot become one), but the fastest row
    overall, by epoch time and by ``pre_s + epochs x epoch_s``, is reported beside the choice.

    Returns ``{device: {"config", "granularity", "group_bytes", "window", "epoch_s",
    "extrapolated", "fastest_lirs", "fastest_overall", "fastest_total", "rule", "text"}}``;
    devices without any lirs row that ran are left out.
    """
    out = {}
    devices = []
    for r in rows:
        if r["device"] not in devices:
            devices.append(r["device"])
    for dev in devices:
        ok = [r for r in rows if r["device"] == dev and r.get("status") == "ok" and r.get("epoch_s")
              and not r.get("reads_only")]
        cand = [r for r in ok if r["kind"] == "lirs" and not r.get("reads_only")]
        if not cand:
            continue
        best = min(r["epoch_s"] for r in cand)
        near = [r for r in cand if r["epoch_s"] <= best * (1 + tolerance)]
        pick = min(near, key=_randomness_key)
        fastest_lirs = min(cand, key=lambda r: r["epoch_s"])
        fastest = min(ok, key=lambda r: r["epoch_s"])
        total = min(ok, key=lambda r: (r.get("pre_s") or 0.0) + epochs * r["epoch_s"])
        text = (f"{dev}: use {pick['name']} (epoch {fmt_s(pick['epoch_s'], pick.get('extrapolated'))}")
        if pick is not fastest_lirs:
            text += (f"; {fastest_lirs['name']} is {fmt_s(fastest_lirs['epoch_s'], fastest_lirs.get('extrapolated'))}, within "
                     f"{tolerance:.0%}, but less random")
        text += ")"
        if fastest["kind"] == "peer" and fastest["epoch_s"] < pick["epoch_s"]:
            caveat = CAVEATS.get(fastest["peer"], "")
            text += (f"; {fastest['name']} is faster here ({fmt_s(fastest['epoch_s'], fastest.get('extrapolated'))}"
                     f" per epoch, {pick['epoch_s'] / fastest['epoch_s']:.1f}x){' ' + caveat if caveat else ''}")
        out[dev] = {
            "config": pick["name"], "granularity": pick["granularity"], "group_bytes": pick.get("group_bytes"),
            "window": pick.get("window"), "epoch_s": pick["epoch_s"], "extrapolated": bool(pick.get("extrapolated")),
            "fastest_lirs": fastest_lirs["name"], "fastest_overall": fastest["name"],
            "fastest_overall_epoch_s": fastest["epoch_s"], "fastest_total": total["name"],
            "rule": f"fastest lirs epoch; within {tolerance:.0%} of it prefer more randomness "
                    f"({' > '.join(RANDOMNESS_ORDER)}, smaller groups, larger windows)",
            "text": text,
        }
    return out


def goals(rows: list[dict]) -> dict:
    """Per device, the project's goals: instance >= 0.9x fio IOPS, group >= 0.85x fio bandwidth (for
    the Loader, and as ``*_reads_only_*`` for the reads-only rows), lirs group/window >= 10x the
    torch DataLoader (records/s). Each ``{"value", "goal", "met", "rows"}``; a goal whose rows did
    not run is left out."""
    out = {}
    for dev in dict.fromkeys(r["device"] for r in rows):
        ok = {r["name"]: r for r in rows if r["device"] == dev and r.get("status") == "ok"}
        g = {}
        for suffix, only in (("", False), ("_reads_only", True)):
            inst = ok.get("lirs-instance" + ("/reads" if only else ""))
            if inst and inst.get("ratio") is not None:
                g["instance" + suffix + "_vs_fio_iops"] = _goal(inst["ratio"], GOALS["instance_vs_fio_iops"],
                                                                [inst["name"]])
            groups = [r for r in ok.values() if r["kind"] == "lirs" and POLICIES[r["granularity"]].unit == "group"
                      and POLICIES[r["granularity"]].steps == "batches"
                      and bool(r.get("reads_only")) == only and r.get("ratio") is not None]
            if groups:
                best = max(groups, key=lambda r: r["ratio"])
                g["group" + suffix + "_vs_fio_bandwidth"] = _goal(best["ratio"], GOALS["group_vs_fio_bandwidth"],
                                                                  [best["name"]])
        gw = [r for r in ok.values() if r["kind"] == "lirs" and POLICIES[r["granularity"]].uses_group_bytes
              and not r.get("reads_only") and r.get("records_per_s")]
        torch_row = ok.get("torch")
        if gw and torch_row and torch_row.get("records_per_s"):
            best = max(gw, key=lambda r: r["records_per_s"])
            g["group_window_vs_torch"] = _goal(best["records_per_s"] / torch_row["records_per_s"],
                                               GOALS["group_window_vs_torch"], [best["name"], "torch"])
        if g:
            out[dev] = g
    return out


def _goal(value, goal, names):
    return {"value": float(value), "goal": goal, "met": bool(value >= goal), "rows": names}
