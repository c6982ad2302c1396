"""The worker process that measures one configuration, seen from the benchmark: started in its own
session, killed with its whole process group when it overruns or the benchmark stops."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from ...warmup import ENV as WARMUP_ENV


def interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class Worker:
    """A worker subprocess in its own session (its DataLoader children included), killed with its
    whole process group if the benchmark is interrupted or the worker overruns."""

    def __init__(self, task: dict, tmpdir: str, timeout_s: float):
        self.task_path = os.path.join(tmpdir, "task.json")
        self.out_path = os.path.join(tmpdir, "row.json")
        self.err_path = os.path.join(tmpdir, "stderr.txt")
        for p in (self.out_path,):
            if os.path.exists(p):
                os.unlink(p)
        with open(self.task_path, "w") as f:
            json.dump(task, f)
        self.timeout_s = timeout_s
        self.proc = None

    def run(self) -> dict:
        env = dict(os.environ)
        # the worker imports the same lirs as this process: the folder above this lirs package
        pkg_parent = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # a runner warms up before it is measured: a cold Loader's compile helpers (lirs.warmup) would
        # still run, or be reaped, in the measured epochs, their CPU counted as the row's
        env[WARMUP_ENV] = "0"
        cmd = [sys.executable, "-c", "import sys; from lirs.eval.bench.measure import worker_main; "
               "sys.exit(worker_main())", self.task_path, self.out_path]
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                                         start_new_session=True)
            try:
                rc = self.proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return {"status": "error", "note": f"worker overran {self.timeout_s:.0f}s and was stopped"}
            finally:
                if self.proc.poll() is None:
                    self.kill()
        if os.path.exists(self.out_path):
            with open(self.out_path) as f:
                return json.load(f)
        with open(self.err_path) as f:
            tail = f.read()[-500:].strip()
        return {"status": "error", "note": f"worker exited with status {rc}: {tail}"}

    def kill(self):
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and the processes it started, by group id
        except ProcessLookupError:
            pass
        p.wait()
