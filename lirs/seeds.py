"""The one seed scheme of lirs: every random draw comes from ``SeedSequence([seed, epoch, purpose])``.

``seed`` is the user's, ``epoch`` the epoch (0 for draws made once per run), ``purpose`` one of
the numbers below. Every purpose of every module lives here, so two draws can never share a stream
by accident (``seed + epoch`` would collide: seed 1 epoch 0 == seed 0 epoch 1). The numbers are
the ones lirs has always used: changing one changes every order drawn with it.
"""
from __future__ import annotations

import numpy as np

# --- core: the planner (lirs.plan)
PLAN_UNITS = 1            # the order of units
PLAN_WINDOW = 2           # the order of records inside each window
PLAN_BATCH = 3            # the order of records inside each page/group batch

# --- core: the external shuffle (lirs.external); spawn_key = the pile's path of re-splits
SHUFFLE_PILES = 0x5301    # the pile of every record (top level and re-splits)
SHUFFLE_ORDER = 0x5302    # the order of the records inside each final pile

# --- evaluation: training baselines and the reference strategies they share (lirs.eval)
TRAIN_INNER = 81          # order of a block's records in each inner pass
TRAIN_REFERENCE = 82      # order of the in-memory reference run
BMF_LAYOUT = 84           # once per run: the block of every record
BMF_ORDER = 85            # every epoch: the order of the blocks
BUFFER_SLOTS = 86         # every epoch: the shuffle buffer's slot draws

BMF_INNER = 601           # every epoch: order of each BMF block's records
DL_CHUNKS = 602           # every epoch: Deep Lake chunk order
DL_SLOTS = 603            # every epoch: Deep Lake buffer slot draws
SHARDS = 604              # once per run: Streaming shard order
SHARD_SAMPLES = 605       # once per run: py2s shuffle inside each whole shard
SPANS = 606               # every epoch: Streaming shard-part order per node
SAMPLES = 607             # every epoch: Streaming shuffles inside parts / blocks
BLOCKS = 608              # every epoch: py1br block sizes and staggers, py1e block sizes and shifts
NAIVE = 609               # every epoch: Streaming naive permutation
PAGES = 610               # every epoch: FFCV page order
PAGE_SAMPLES = 611        # every epoch: FFCV order inside each page
PAGE_PICKS = 612          # every epoch: FFCV active-page draws
PILES = 613               # two-pass: pile of every record
PILE_SHUFFLE = 614        # two-pass: order inside each pile
RUNS = 615                # terashuf: order inside each run
MERGE = 616               # terashuf: run draws of the merge
CHUNKS = 617              # chunk_roundrobin: order inside each chunk
ROUNDS = 618              # chunk_roundrobin: order inside each round

QUALITY_IDEAL = 640       # the uniform reference permutation of the quality metrics

CORGI_BLOCKS = 650        # every epoch: CorgiPile's block order (also Corgi²'s online pass)
CORGI_BUFFER = 651        # every epoch: CorgiPile's order inside each buffer
CORGI2_BLOCKS = 652       # once per run: Corgi²'s offline block order
CORGI2_BUFFER = 653       # once per run: Corgi²'s offline order inside each buffer

PEER_SAMPLER = 0xBE01     # torch RandomSampler / memmap permutation
PEER_INMEMORY = 0xBE02    # in-memory permutation
PEER_BMF_DEAL = 0xBE03    # order of a BMF block's records in the peer loader

GEN_BASE = 0x6E00         # lirs gen: GEN_BASE + 16 * profile number + use (16 uses per profile)
GEN_SPAN = 16 * 16        # the purposes GEN_BASE .. GEN_BASE + GEN_SPAN - 1 belong to lirs gen
GEN_TFRECORD = 0x6F01     # lirs.eval.tfrecords: payload sizes and bytes of a random TFRecord file


def seq(seed: int, epoch: int, purpose: int, spawn_key: tuple = ()) -> np.random.SeedSequence:
    """``SeedSequence([seed, epoch, purpose], spawn_key=spawn_key)``: the root of one stream."""
    return np.random.SeedSequence([int(seed), int(epoch), int(purpose)],
                                  spawn_key=tuple(int(x) for x in spawn_key))


def rng(seed: int, epoch: int, purpose: int, spawn_key: tuple = ()) -> np.random.Generator:
    """A numpy ``Generator`` on the stream of ``(seed, epoch, purpose)``."""
    return np.random.default_rng(seq(seed, epoch, purpose, spawn_key))


def key(seed: int, epoch: int, purpose: int, spawn_key: tuple = ()) -> int:
    """One 64-bit key (a Python int in [0, 2**64)) of ``(seed, epoch, purpose)``: what the numba
    kernels take to start their counter-based streams."""
    return int(seq(seed, epoch, purpose, spawn_key).generate_state(1, np.uint64)[0])


def purposes() -> dict[str, int]:
    """Every named purpose (for the test that no two share a number)."""
    return {k: v for k, v in globals().items() if k.isupper() and isinstance(v, int) and k != "GEN_SPAN"}
