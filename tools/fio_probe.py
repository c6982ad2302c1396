"""Print this device's envelope as fio measures it on a file (what `lirs bench` starts from).

    python tools/fio_probe.py FILE [--runtime 5]

4 KiB random reads at queue depth 1, 32 and 128, 64 KiB random reads and 1 MiB sequential reads,
O_DIRECT and read-only, on FILE itself; and the smallest group size at which the device's 4 KiB
IOPS times the group size reaches its sequential bandwidth (the group size lirs bench calls `auto`).
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--runtime", type=float, default=5.0, help="seconds per fio job (default 5)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from lirs.eval.fio import INSTALL_HINT, run_envelope

    env = run_envelope(a.file, runtime_s=a.runtime)
    if not env.get("available"):
        print(f"fio: {env.get('reason')}; {INSTALL_HINT}", file=sys.stderr)
        return 1
    if a.json:
        json.dump(env, sys.stdout, indent=2)
        print()
        return 0
    for name, j in env["jobs"].items():
        print(f"{name:14s} {j['iops']:>12,.0f} IOPS {j['bw_bytes'] / 1e6:>10,.0f} MB/s "
              f"{j.get('mean_lat_us') or 0:>9,.0f} us")
    iops, seq = env["jobs"]["rand4k_qd128"]["iops"], env["jobs"]["seq1m_qd16"]["bw_bytes"]
    g = 65536
    while iops * g < seq and g < (64 << 20):
        g *= 2
    print(f"group size where IOPS x size reaches sequential bandwidth: {g // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
