"""The controller's heap between rounds: a full garbage collection hourly, not every round.

The controller keeps every active job in memory across rounds (accounts, the parsed
Slurm records, plan inputs: about two million objects at 12,000 jobs), and each round
allocates enough for CPython to run its oldest-generation collection about once per
round: ~85 ms of a round at 12,000 jobs, spent finding that nothing long-lived is
garbage. After each round the surviving objects are frozen (``gc.freeze``: moved to a
generation the collector never scans), so a round's collections look only at what
that round made. What dies later is still freed by reference counting; only garbage
in reference cycles among frozen objects waits for the hourly full collection
(``gc.unfreeze`` + ``gc.collect``), which bounds that memory and costs one round
about the ~85 ms every round paid before.

During a round, and the full observation before it, the collector is off
(``round()``, ``paused()``): a round's objects (parsed records, plan inputs) live
until it ends, so every collection during it found nothing: about 250 collections a
round at 12,000 jobs (~25 ms), 19 larger ones at 55,000 (~270 ms). Reference
counting still frees what a round drops; garbage in cycles waits for a collection
between rounds (the youngest generation every YOUNG_THRESHOLD allocations, not 700)
or the hourly full one.
"""
from __future__ import annotations

import gc
import math
from contextlib import contextmanager
from typing import Iterator

FULL_COLLECTION_EVERY_S = 3600.0
YOUNG_THRESHOLD = 20_000


class Heap:
    def __init__(self, full_every_s: float = FULL_COLLECTION_EVERY_S):
        self.full_every_s = full_every_s
        self.collected_at_s = -math.inf
        self.full_collections = 0
        if gc.get_threshold()[0] < YOUNG_THRESHOLD:  # process-wide; never lowered if set higher
            gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    @contextmanager
    def round(self, now_s: float) -> Iterator[None]:
        """The collector off while the block runs; after it (even when it raised) on
        again and ``after_round``."""
        try:
            with self.paused():
                yield
        finally:
            self.after_round(now_s)

    @staticmethod
    @contextmanager
    def paused() -> Iterator[None]:
        """The collector off while the block runs, as it was after it: a full
        observation, whose parsed records and kept entries live into the round."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()

    def after_round(self, now_s: float) -> None:
        """Freeze what the round left; first a full collection when one is due."""
        if now_s - self.collected_at_s >= self.full_every_s:
            self.collected_at_s = now_s
            if self.full_collections:  # the first round: nothing frozen yet to look at again
                gc.unfreeze()
                gc.collect()
            self.full_collections += 1
        gc.freeze()
