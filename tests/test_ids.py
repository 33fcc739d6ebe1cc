"""controller.core.ids: every decision id is minted there, and reads back to its kind."""
import re
from pathlib import Path

import pytest

from controller.core import ids

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind", sorted(ids.ROUND_PREFIXES))
def test_a_round_decision_reads_back_to_its_kind(kind):
    assert ids.kind_of(ids.decision_id(12, kind, 3)) == kind


@pytest.mark.parametrize("kind", sorted(ids.CAUSED_SUFFIXES))
def test_a_caused_lever_reads_back_to_its_kind(kind):
    assert ids.kind_of(ids.caused_id("r12.3", kind)) == kind


def test_two_kinds_never_share_a_prefix():
    with pytest.raises(AssertionError, match="minted by both"):
        ids._check_distinct({"hold": "h", "handoff": "h"})  # noqa: SLF001 - the check itself


def test_an_unknown_kind_is_refused():
    with pytest.raises(KeyError):
        ids.decision_id(1, "no_such_kind", 1)  # ("nice" is a kind now: SetNice)


# an f-string that builds "r<round>." or "<id>.<suffix>" by hand
MINTED_BY_HAND = re.compile(r'f"r\{[^}]*\}\.|f"\{[^}]*decision_id\}\.')


def test_no_decision_id_is_minted_outside_core_ids():
    places = [f"{path.relative_to(ROOT)}:{n}" for folder in ("controller", "slurm_plugin", "bench")
              for path in sorted((ROOT / folder).rglob("*.py")) if path.name != "ids.py"
              for n, line in enumerate(path.read_text().splitlines(), 1) if MINTED_BY_HAND.search(line)]
    assert not places, places
