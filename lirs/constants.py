"""Constants shared by every stage of the data path."""
from __future__ import annotations

INT32_MAX = 2**31 - 1      # CSR index arrays are int32 up to it (scipy's rule), else int64
INT64_MAX = 2**63 - 1      # the largest feature count (indices are int64 past INT32_MAX)
GROUP_BYTES_MAX = 1 << 62  # the largest group_bytes: group spans and their sums stay within int64
BLOCK = 4096               # O_DIRECT alignment of offsets, sizes and buffers; the planner's page
COPY_ALIGN = 64            # where a copying engine's extents start in a step's buffer (a cache line)
FORMATS = ("libsvm", "lines", "tfrecord", "npy", "fixed")   # record formats of an index
VARIABLE_FORMATS = ("libsvm", "lines", "tfrecord")          # formats whose records have their own lengths
BYTES_FORMATS = ("lines", "tfrecord")                       # formats whose records decode to bytes (no tensor)
DEFAULT_GROUP_BYTES = 65536  # group granularity: records whose start lies in one aligned 64 KiB span
DEFAULT_PREFETCH = 4        # batches the loader reads and decodes ahead of the consumer
DEFAULT_WINDOW = "auto"     # window granularity: the memory its random groups are dealt from (lirs.windows)
# "auto" window: 5% of the data, at least 16 MiB, at most 256 MiB. From the frontier measured by
# benchmarks/bench_frontier.py: at 5% batch pairs meet again 1.05x as often as under a uniform order
# (4 MiB: 2.7x, 16 MiB: 1.11x on 500 MB); extra pairs grow as group bytes x data / window^2.
# an epoch's plan drops the index pages it mapped every this many batches (lirs.pages.release_pages):
# RSS then holds the offsets of a few batches, not of the whole dataset, at one madvise per interval.
# Each page fault maps its neighbours too (the kernel's fault-around): a group batch of 1024 records
# maps ~3.6 MB of a 38 GB dataset's index, so 16 batches hold ~60 MB (256 held the whole index).
INDEX_RELEASE_BATCHES = 16
# a sidecar map smaller than this stays mapped (its RSS is at most its size): the offsets' block
# bases (8 B per 1024 records) below 8M records, so that a release is one madvise, not two
INDEX_RELEASE_MIN_BYTES = 64 << 10
# the unit table's scan of every offset goes this many records at a time, releasing the index pages
# after each (32 MiB of offsets): the whole index of a large dataset is never mapped at once
UNIT_SCAN_RECORDS = 1 << 23
# where its offsets cannot be read with pread (see INDEX_READ_GAP), a window's read step (and a
# group step of several batches) finds its extents this many runs (groups) at a time, releasing
# the index pages after each piece. A fault maps the index around the
# offsets it needs, and where the page cache holds the index in large folios (ext4 on recent kernels)
# it maps the whole folio, up to 2 MiB: a piece of runs scattered over a large index maps up to
# STEP_PIECE_RUNS x 2 MiB of it. Measured on an 8 GB kdd-like file (90 MiB of offsets; ad-hoc walk
# of 3,000 planned batches): a group step (~64 runs spread over the whole index) mapped 53 MiB of it
# with pieces of 256 or 64 runs, 22 MiB with 16, 8 MiB with 4; planning 0.049 / 0.051 / 0.053 /
# 0.070 ms per batch. A window's runs are sorted, so its pieces map less (8 / 4 / 4 / 4 MiB).
# 16 keeps the mapped index within ~32 MiB whatever the dataset's size, for ~5% more planning time.
STEP_PIECE_RUNS = 16
# ...where the index is a memory map of its sidecar, such a step reads its offsets with pread
# instead (no page of the table is mapped): runs whose offsets lie within INDEX_READ_GAP records
# (4 KiB of offsets) of each other share one read of at most INDEX_READ_SPAN records (256 KiB).
INDEX_READ_GAP = 1024
INDEX_READ_SPAN = 1 << 16
# a group read step covers consecutive batches holding at least this many bytes: every
# step costs the pool's threads Python work under the GIL (a read call, a decode call, building the
# CSR matrix), which at 1024-record kdd-like batches (~370 KB) bounded the epoch, not the cores or the
# device; a batch is then a slice of its step, as a window's batches are
STEP_MIN_BYTES = 4 << 20
# A read step holds arrays of its own for every record, whatever the record's bytes: its record IDs
# (and a window's deal order), its extents and each record's place in them, 100 B a record while the
# step is made and 44 B kept (ad hoc: tracemalloc over one window step of 1-byte .npy records), then
# the plans of the batches ahead, two or three steps in flight. An epoch over a 64 MiB .npy of 1-byte
# records grew ~190-225 B of peak RSS a record of its window (ad hoc: windows of 0.5M to 4M records):
# about this many bytes a record of a window or of a step of several batches
STEP_RECORD_COST = 200
# what a window epoch holds for each byte of its window (docs/results.md, "What a window's memory
# costs": 7.5x at 16 MiB). The auto window and a step of STEP_MIN_BYTES hold at most their bytes x
# this / STEP_RECORD_COST records (lirs.windows.held_bytes), so that records under 27 B (a file of
# uint8, int16 or float32 token IDs) do not make an epoch hold ~75x its window's bytes; records of
# 27 B or more are planned as by bytes alone
WINDOW_HELD_RATIO = 7.5
# An epoch's batch plans are made on a thread of their own (lirs.ahead), handed to the consumer in
# chunks of 1, 2, 4, ... up to PLAN_CHUNK batches, at most PLAN_AHEAD_CHUNKS chunks ahead.
PLAN_CHUNK = 8
PLAN_AHEAD_CHUNKS = 2
# A window epoch's planning runs a window's batches ahead (lirs.policies.plans_ahead): its consumer
# takes the plans of a whole window at once (the batches before the first one of the window after,
# which it then hands out), and with two chunks ready it waited for the planning thread to plan
# them (on 16 cores a window epoch's consumer spent 43% of its time waiting for plans, 32% on 8,
# benchmarks/results/16cores/session11/cores_gil.json). That holds about one window more of planned records:
# the plans' record IDs and the next window's step arrays, about 36 B a record (1/10 of a kdd-like
# window's bytes), a small part of the two or three windows in flight, read and decoded.
PLAN_AHEAD_MAX_BATCHES = 4096
# the most bytes of shared memory a DataLoader's ring of slots for its workers' items may take
# (lirs.policies.ring_slots; a slot's pages are resident once a worker has used it): with
# window steps each worker's slots hold a window's items back while the main process hands out
# another worker's window; past this, an item finding no free slot crosses as a segment of its own
RING_MAX_BYTES = 1 << 30
# a loader's pool has a thread per usable core and one more (reads wait for the device), but with
# an engine whose reads are copies (not direct) only usable cores - 1 of them take steps whenever
# there are some: the consumer runs queued steps itself
# while it waits, and a thread more than the cores preempts it while it holds the GIL (a group epoch
# from /dev/shm on 2 cores held the GIL 41% of the wall time with three threads taking steps, 17%
# with one and the consumer helping, at the same rate). The others take a step when the process
# kept fewer than cores - CORE_IDLE cores busy over the last UTIL_WINDOW_S (a consumer away on a
# GPU step, threads waiting for the device), looking every EXTRA_POLL_S.
CORE_IDLE = 0.5
UTIL_WINDOW_S = 0.02
EXTRA_POLL_S = 0.002
PLAN_AHEAD_MIN_THREADS = 5  # a pool of fewer threads (usable cores + 1) plans on the consumer's thread
# On POOL_ALONE_MIN_CORES usable cores or more with copying reads, the pool's threads run every read
# step and the consumer only waits (as with a direct engine), and a group step's extents are found
# by the planning thread (not deferred to the thread that reads the step): there the consumer's own
# Python, not the cores, sets the rate, and a consumer that ran a step while the step it waited for
# was done delayed every batch; a deferred step's extents cost the pool's threads GIL hand-offs.
# On 16 cores from the page cache (1 GB kdd-like, group, one run each in one call), 5.99M records/s
# at the time, 7.70M with the consumer running no step, 6.88M with the extents found ahead
# (benchmarks/results/16cores/session11/bisect.json). Fewer cores keep both: there the consumer's help is a core's
# worth and planning runs on its thread. 4 and 8 cores were not measured apart.
POOL_ALONE_MIN_CORES = 8
# A read from a filesystem held in memory (tmpfs, ramfs) is a copy: one thread per this many bytes
# of the step (up to the engine's depth) copies it, so a batch or a group step is read by the
# calling thread alone (helpers woken for it only hand the GIL around: a group epoch from /dev/shm
# on 2 cores ran 2.9-3.2M records/s with 8, 3.3M with 1) while a window of tens of MiB is copied by
# several (on 16 cores one thread copying each window held window epochs at 1.7 GB/s, decode 4.3).
IN_MEMORY_PARTY_BYTES = 8 << 20
# each thread that preads (threads and buffered engines) reads through descriptors of its own: a
# pread on a descriptor the threads share takes a reference on the one open file behind it, an
# atomic add on one cache line from every core (an instance epoch's reads, 2 threads on 2 cores:
# 1.07x with one each, benchmarks/results/pread.json). For datasets of up to OWN_FDS_MAX_FILES
# files, within 1/OWN_FDS_LIMIT_SHARE of the soft limit of open files for all the engines together.
OWN_FDS_MAX_FILES = 16
OWN_FDS_LIMIT_SHARE = 8
FD_MARGIN = 128  # open files left to the rest of the process when lirs sizes what it opens by the limit
# outputs of a whole-file decode (load_svmlight) of at least this many bytes are mapped with their
# pages populated in one call:
# numpy asks for transparent huge pages from 4 MiB on, and where the kernel compacts memory on that
# first touch (THP defrag "madvise", the default) a 300 MB decode's kernel time swung 0.03-0.48 s;
# populated 4 KiB pages cost a steady ~0.08 s (lirs.memory)
POPULATE_MIN_BYTES = 4 << 20
# arrays the loader allocates again and again (a window's read buffer and decoded arrays) from this
# size on lie in blocks that are reused once the arrays are gone, at most RECYCLE_KEEP_BLOCKS of
# them kept waiting (lirs.memory.Recycler): memory given back and touched again cost ~17x more
# than reused memory on the virtual machines measured here (free pages reported to the host; ad hoc)
RECYCLE_MIN_BYTES = 8 << 20
# a read step's decoded arrays (a group step's: ~2 MB each for kdd-like records) are recycled from
# this size on: numpy's memory of that size went back to the system when a step's last batch was
# dropped, the consumer's thread holding the GIL through free() and its madvise (lirs.svmdecode)
RECYCLE_STEP_MIN_BYTES = 1 << 20
RECYCLE_KEEP_BLOCKS = 6
# a read step's small arrays (the engine's per-extent counts, the plan's extents) up to this size are
# zeroed or copied with the GIL held (lirs.memory.zeros_held, copy_held): numpy lets it go from
# about 1 KiB on, and each such release on a pool thread is a hand-off the other threads wait on
HELD_MAX_BYTES = 1 << 20
# a read step's extent arrays are made the size of its records (a bound on its extents) and cut to
# the extents found: the cut is a view of them up to this size (a group step's three arrays hold
# ~280 KB, a few steps in flight), a copy from it on (a window's hold tens of MB for a few KB of
# extents). Each copy was several Python calls of a read step's path, where each call costs
# microseconds (the step's bytes have just gone through the caches)
EXTENTS_COPY_MIN_BYTES = 1 << 20
# a read step's runs up to this many are put in ID order by the kernel that finds them
# (lirs.kernels.plan.run_heads, an insertion sort: ~90 runs a page step, ~70 a group step, ~255 a
# window's, a few microseconds) instead of numpy's argsort, which lets the GIL go once more a step;
# an instance step's thousands of runs still go to numpy
RUNS_SORTED_MAX = 256
# window steps an epoch keeps in flight: the one being consumed and the next one, read and decoded
# meanwhile; a third where the reads wait for a device (O_DIRECT) or the pool has
# WINDOW_THIRD_MIN_CORES usable cores or more: the window after the next is then read while the next
# one is decoded (a window is decoded by the cores at once, one at a time), instead of after it.
# Measured on 2 cores from this machine's NVMe disk (engine uring, 300 MB kdd-like, 16 MiB windows):
# 1.06x the records/s of two, peak RSS +34 MiB (benchmarks/results/stages.json). From the page cache on
# 2 cores it changed nothing measurable (ad hoc: the cores read and decode either way); on 16 cores a window epoch kept 7.8
# of 16 cores busy and its consumer waited 38% of the time with two (benchmarks/results/16cores/second-lease/).
WINDOWS_IN_FLIGHT = 2
WINDOWS_IN_FLIGHT_AHEAD = 3
WINDOW_THIRD_MIN_CORES = 8
WINDOW_AUTO_SHARE = 0.05
WINDOW_AUTO_MIN = 16 << 20
WINDOW_AUTO_MAX = 256 << 20
# uring engine: while its ring is full, one io_uring_enter waits for this share of the depth in
# completions (at least one; 0 = one, as fio does). 1/8 was measured at QD 32 within the run-to-run
# spread of benchmarks/bench_engines.py on this shared 2-core machine, so fio's choice stays.
URING_WAIT_SHARE = 0.0
# uring engine: reads handed to the kernel per io_uring_enter. More than two in one call and the
# kernel plugs the block queue and dispatches them as one batch; on this virtio disk that kept 4 KiB
# QD 32 reads at 0.78-0.85x fio's rate (device latency 0.40 ms against fio's 0.29 ms, at a fuller
# queue), while two per call gave 0.97-1.05x and one per call 0.91-1.0x (ad-hoc A/B against fio in
# the same run; benchmarks/bench_engines.py records it). Bigger reads are not hurt (64 KiB QD 32).
URING_SUBMIT_CHUNK = 2
# sequential scans (`lirs index`): each chunk is read with O_DIRECT in pieces of SCAN_READ_BYTES,
# SCAN_READ_DEPTH of them in flight: the shape of fio's sequential reference (1 MiB, QD 16). Direct
# reads skip the page cache, whose copy and reclaim (kswapd) cost CPU the scan needs on 2 cores.
SCAN_READ_BYTES = 1 << 20
SCAN_READ_DEPTH = 16
# the most reads an engine keeps in flight (``depth``): far past any NVMe queue's use, under
# io_uring's own limit (32768 entries), and a thread each for the threads engine
MAX_DEPTH = 4096
SCAN_CHUNKS_AHEAD = 2  # chunks read while one is scanned: the queue stays full across chunk ends
# what every temporary name of lirs carries before its PID (lirs.litter.temp_name): the crash
# cleaner removes only names with it, of processes that are gone
TEMP_MARK = ".lirs-tmp-"
