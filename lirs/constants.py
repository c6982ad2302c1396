"""Constants shared by every stage of the data path."""
from __future__ import annotations

BLOCK = 4096               # O_DIRECT alignment of offsets, sizes and buffers; the planner's page
GRANULARITIES = ("instance", "page", "group", "window")   # units of shuffling, most random first
DEFAULT_GROUP_BYTES = 65536  # group granularity: records whose start lies in one aligned 64 KiB span
DEFAULT_WINDOW = "64M"      # window granularity: bytes of random groups dealt together (see lirs.windows)
