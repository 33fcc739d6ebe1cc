"""FreeGpus.place (the index by free count the replays place on, its spread fill a
lean loop of its own: issue 37) answers as the plain ``place`` on the same free GPUs,
consolidated or spread, single node or gang, as GPUs are taken and given back."""
from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core.placement import FreeGpus, place  # noqa: E402


def test_index_places_as_the_plain_rule():
    rng = random.Random(37)
    for _ in range(200):
        free_by_node = {f"n{i:02d}": rng.randrange(9) for i in range(rng.randrange(1, 12))}
        free = FreeGpus(free_by_node)
        for _ in range(30):
            num_gpus, consolidate = rng.choice((1, 2, 3, 4, 6, 8, 12, 16, 24)), rng.random() < 0.5
            got = free.place(num_gpus, consolidate=consolidate, max_gpus_per_node=8)
            assert got == place(num_gpus, dict(free.free), consolidate=consolidate, max_gpus_per_node=8)
            if got is not None and rng.random() < 0.7:
                for node, gpus in got:
                    free.take(node, gpus)
            elif rng.random() < 0.5:  # a victim leaves: its GPUs free again
                node = rng.choice(sorted(free.free))
                free.give(node, rng.randrange(1, 5))
        assert free.total == sum(free.free.values())
