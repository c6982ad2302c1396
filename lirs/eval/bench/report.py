"""The results of ``lirs bench`` as text (:func:`format_table`) and as a plot (:func:`plot`)."""
from __future__ import annotations

import logging
import math
import os
import shlex
import sys

from ...units import format_bytes
from ..figures import pyplot, save_png

log = logging.getLogger("lirs.eval.bench")


def format_number(v, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits in one notation for every magnitude: a k/M/G suffix
    from a thousand up, plain decimals below, never an exponent (9650 -> ``9.65k``, 83000 ->
    ``83.0k``, 1.2e6 -> ``1.20M``, 0.0123 -> ``0.0123``, 999.7 -> ``1.00k``); None -> ``-``."""
    if v is None:
        return "-"
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return "0" if v == 0 else str(v)
    r = float(f"{v:.{digits}g}")  # round first: 999.7 is 1.00k, not 1000
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(r) >= div or div == 1.0:
            x = r / div
            decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
            return f"{x:.{decimals}f}{suffix}"
    raise AssertionError("unreachable")


def fmt_s(s, extrapolated=False) -> str:
    if s is None:
        return "-"
    mark = "~" if extrapolated else ""
    if s >= 3600:
        return f"{mark}{s / 3600:.1f}h"
    if s >= 100:
        return f"{mark}{s:.0f}s"
    return f"{mark}{format_number(s)}s"


def _fmt_n(v, digits=3) -> str:
    return format_number(v, digits)


def device_label(res: dict, dev: str) -> str:
    """How output names envelope ``dev``: the disk as it is by the transport sysfs reports for it
    (``"virtio"``, ``"nvme"``, ``"sata"``...; :func:`lirs.eval.bench.disk.describe`), so that a
    virtio disk is never called nvme; a throttled envelope by its name."""
    env = (res.get("envelopes") or {}).get(dev) or {}
    transport = (res.get("disk") or {}).get("transport")
    if env.get("read_iops") is None and env.get("read_bps") is None and transport and transport != "unknown":
        return transport
    return dev


def row_line(row: dict, label: str | None = None) -> str:
    dev = label or row["device"]
    if row["status"] != "ok":
        return f"{dev}: {row['name']}: {row['status']} ({row.get('note')})"
    ratio = "" if row.get("ratio") is None else f", {row['ratio']:.2f}x fio {row['bound']['fio_job']}"
    return (f"{dev}: {row['name']}: epoch {fmt_s(row['epoch_s'], row.get('extrapolated'))}, "
            f"{_fmt_n(row.get('records_per_s'))} records/s{ratio}")


def format_table(res: dict) -> str:
    """The results as a plain-text table, one block per device, then the recommendations."""
    head = ("config", "epoch", "records/s", "MB/s", "reads/s", "ampl.", "CPU s/epoch", "peak RSS", "pre",
            "bound", "ratio")
    lines = []
    for dev in res["settings"]["devices"]:
        env = res["envelopes"][dev]
        caps = "" if env["read_iops"] is None else \
            f" (capped at {env['read_iops']:,} IOPS, {env['read_bps'] / 1e6:.0f} MB/s)"
        label = device_label(res, dev)
        disk = res.get("disk") or {}
        if env["read_iops"] is None and env["read_bps"] is None and disk.get("label"):
            caps = f" ({disk['label']}, as it is; envelope {dev})"
        lines.append(f"{label}{caps}")
        fres = res["fio"].get(dev) or {}
        if fres.get("available"):
            j = fres["jobs"]
            parts = [f"{k} {_fmt_n(j[k].get('iops'))} IOPS" for k in ("rand4k_qd1", "rand4k_qd32", "rand4k_qd128")
                     if k in j and j[k].get("iops")]
            parts += [f"{k} {j[k]['bw_bytes'] / 1e6:.0f} MB/s" for k in ("rand64k_qd32", "seq1m_qd16")
                      if k in j and j[k].get("bw_bytes")]
            lines.append("  fio: " + ", ".join(parts))
        else:
            lines.append(f"  fio: {fres.get('reason', 'not run')}")
        rows = [r for r in res["rows"] if r["device"] == dev]
        table = [head]
        skipped = []
        for r in rows:
            if r["status"] != "ok":
                skipped.append(f"  {r['name']}: {r['status']}: {r.get('note')}")
                continue
            b = r.get("bound") or {}
            table.append((
                r["name"], fmt_s(r["epoch_s"], r.get("extrapolated")), _fmt_n(r.get("records_per_s")),
                "-" if r.get("mb_per_s") is None else f"{r['mb_per_s']:.1f}", _fmt_n(r.get("reads_per_s")),
                "-" if r.get("amplification") is None else f"{r['amplification']:.2f}",
                "-" if r.get("cpu_s_per_epoch") is None else fmt_s(r["cpu_s_per_epoch"], r.get("extrapolated")),
                format_bytes(r.get("peak_rss_bytes")), fmt_s(r.get("pre_s")),
                "-" if not b else f"{b['metric']} {b['fio_job']}",
                "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x"))
        if len(table) > 1:
            w = [max(len(str(t[i])) for t in table) for i in range(len(head))]
            for t in table:
                lines.append("  " + "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])
                                              for i, c in enumerate(t)).rstrip())
        lines.extend(skipped)
        lines.append("")
    if any(r["status"] == "ok" and r.get("extrapolated") and r["device"] in res["settings"]["devices"]
           for r in res["rows"]):  # the mark's key, where a row shows the mark
        lines.append("~ = extrapolated from a budget-limited sample of the epoch")
    recs = res.get("recommendation") or {}
    if recs:
        lines.append("")
        lines.append("recommendation (" + next(iter(recs.values()))["rule"] + "):")
        for dev in res["settings"]["devices"]:
            if dev in recs:
                text = recs[dev]["text"]
                if text.startswith(f"{dev}: "):  # the recommendation is keyed by envelope; name the disk
                    text = f"{device_label(res, dev)}: " + text[len(dev) + 2:]
                lines.append("  " + text)
    for n in res.get("notes") or []:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def plot(res: dict, path: str, title: str | None = None) -> bool:
    """Epoch time per configuration, one panel per device, log scale; extrapolated bars hatched,
    the recommended configuration in bold. Returns False when matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    devs = [d for d in res["settings"]["devices"]
            if any(r["device"] == d and r["status"] == "ok" for r in res["rows"])]
    if not devs:
        log.warning("no plot: no configuration ran")
        return False
    nrows = max(len([r for r in res["rows"] if r["device"] == d and r["status"] == "ok"]) for d in devs)
    fig, axes = plt.subplots(1, len(devs), figsize=(4.8 * len(devs) + 1.5, 0.38 * nrows + 1.8), squeeze=False)
    for ax, dev in zip(axes[0], devs):
        rows = [r for r in res["rows"] if r["device"] == dev and r["status"] == "ok"]
        rows.sort(key=lambda r: r["epoch_s"])
        rec = (res.get("recommendation") or {}).get(dev, {}).get("config")
        y = list(range(len(rows)))
        colors = ["tab:gray" if r["kind"] == "peer" else ("lightsteelblue" if r.get("reads_only") else "tab:blue")
                  for r in rows]
        bars = ax.barh(y, [r["epoch_s"] for r in rows], color=colors)
        for b, r in zip(bars, rows):
            if r.get("extrapolated"):
                b.set_hatch("//")
                b.set_alpha(0.7)
            ax.text(r["epoch_s"], b.get_y() + b.get_height() / 2, " " + fmt_s(r["epoch_s"], r.get("extrapolated")),
                    va="center", fontsize=7)
        ax.set_yticks(y)
        ax.set_yticklabels([r["name"] for r in rows], fontsize=8)
        for lab, r in zip(ax.get_yticklabels(), rows):
            if r["name"] == rec:
                lab.set_fontweight("bold")
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("epoch time (s, log)")
        env = res["envelopes"][dev]
        ax.set_title(dev if env["read_iops"] is None else
                     f"{dev} ({env['read_iops']:,} IOPS, {env['read_bps'] / 1e6:.0f} MB/s)", fontsize=9)
        lo, hi = min(r["epoch_s"] for r in rows), max(r["epoch_s"] for r in rows)
        ax.set_xlim(lo / 2, hi * 8)
    title = title or (f"lirs bench: {os.path.basename(res['data']['path'])} ({format_bytes(res['data']['file_bytes'])}, "
                      f"{res['data']['records']:,} records)")
    fig.suptitle(title + "\nblue: lirs (light: reads only), gray: peers; hatched: extrapolated; bold: recommended",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_png(fig, path)  # atomically: a save stopped midway leaves the previous plot whole
    return True


def command_line(argv=None) -> str:
    """The command that ran, for the JSON."""
    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in argv)
