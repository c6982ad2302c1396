"""``lirs bench``: which granularity wins on *this* disk, by how much, and against what.

For every device envelope (:mod:`lirs.eval.envelope`: ``nvme`` = the disk as it is, printed by the
transport sysfs reports for it, :func:`describe_disk`, or by its filesystem where no disk holds it;
``ssd`` and ``hdd`` = the same disk under a blkio throttle), :func:`run_bench`

1. measures the envelope with fio on the data file (:mod:`lirs.eval.fio`), inside the envelope;
2. runs every configuration in its own worker process, placed in the envelope's cgroup (only the
   worker and its children are throttled): lirs granularities through :class:`lirs.Loader`
   (``O_DIRECT`` where the engine opens it, not on tmpfs; prefetch, decode: what a user gets) and the peers
   of :mod:`lirs.eval.peers`;
3. reports per configuration the epoch time, records/s, MB/s, reads/s, read amplification, CPU
   time and peak RSS of the worker, and each rate as a ratio to the fio figure it is bound by;
4. recommends, per envelope, a lirs configuration (:func:`recommend`).

Bounded runs. A configuration reads for about ``budget_s`` seconds (plus its one-off
pre-processing; past the budget it goes on until three batches have arrived, at most 3x the
budget). When an epoch does not finish in that time its duration is extrapolated
(``extrapolated: true``, ``extrapolation`` says how): the time to the first batch, which fills
the prefetch pipeline, plus the remaining records at the steady rate of the later batches. An
HDD envelope makes instance-granularity epochs hours long; a sample of a few thousand random
reads predicts them.

Cold caches. lirs, the shuffle buffer, BMF and the external shuffle read with ``O_DIRECT``. The
buffered peers (in-memory load, torch, memmap) start every epoch, and their pre-processing, with
the data file's pages evicted from the page cache (``posix_fadvise(DONTNEED)``: no root needed,
other files' cache untouched; ``cache_evicted`` and ``resident_after_evict_bytes`` in each row).

I/O counts. Where the cgroup exists and counts the disk, reads and bytes are the device's own
counters for the worker (``blkio.throttle.io_serviced`` / ``io_service_bytes``): the same
yardstick for lirs and for peers that read through the page cache. Elsewhere (no cgroup, or no
line for the disk: since Linux 6.10 an uncapped group on a disk no group ever capped counts
nothing) the loaders' own counters are used (``io_source`` says which).

Results (``SCHEMA_VERSION`` 1) are a JSON-able dict; see :data:`SCHEMA` and :func:`validate`.
``save_recommendation`` writes ``DATA.lirs.bench.json`` beside the index: a
``Loader(..., granularity="auto")`` then uses that configuration (:func:`auto_settings`).
"""
from __future__ import annotations

from ...policies import GRANULARITIES  # noqa: F401 - the public API of lirs.eval.bench
from ...recommendation import (RECOMMENDATION_SUFFIX, RECOMMENDATION_VERSION, auto_settings,  # noqa: F401
                               load_recommendation, recommendation_path, save_recommendation, saved_device,
                               write_json)
from .configs import (DEVICES, MIN_AUTO_GROUP, Config, add_ratios, bound_of, envelope_group_bytes,  # noqa: F401
                      format_size, lirs_configs)
from .measure import measure_task, worker_main, run_config  # noqa: F401
from .recommend import GOALS, RANDOMNESS_ORDER, TIE_TOLERANCE, goals, recommend  # noqa: F401
from .disk import describe as describe_disk  # noqa: F401
from .report import command_line, device_label, format_number, format_table, plot  # noqa: F401
from .run import run_bench  # noqa: F401
from .runners import WARM_EPOCH, LirsReadsRunner, LirsRunner  # noqa: F401
from .schema import ROW_STATUSES, SCHEMA, SCHEMA_VERSION, validate  # noqa: F401
