"""Issue 36's figures on the size and shape of the code (the design's "Done when" table):
files over 600 lines in controller/ and slurm_plugin/, and the rooms of controller/service/.

Read-only: counts lines and lists folders, nothing is imported or executed.
Measured on main before the split helpers: 9 files over 600 lines (parse.py 1,273,
slurm backend.py 1,191, store.py 1,078, daemon.py 902, preflight.py 755, traces.py 745,
accounting.py 742, replay cluster.py 690, cli reports.py 628); service/ had 0 loose
files and its 4 rooms (28 loose files, no rooms, before the step that made them)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("controller", "slurm_plugin")
MAX_LINES = 600
MAX_FILES_OVER = 4  # the design's target: at most 4, each with its reason below

BEING_SPLIT = "being split (issue 36)"
# Every file over MAX_LINES, with the reason it stays big. An entry whose file is back
# under the limit must go (the test says so), and the count of files over the limit that
# are not BEING_SPLIT must stay within MAX_FILES_OVER: once the splits land, the
# BEING_SPLIT entries go and the target holds.
BIG_FILES = {
    "controller/service/round/daemon.py": BEING_SPLIT,
}

SERVICE = ROOT / "controller" / "service"
SERVICE_ROOMS = {"round", "acting", "state", "ops"}


def files_over(limit: int = MAX_LINES) -> dict[str, int]:
    """Path (from the repository root) -> line count of each .py file over ``limit`` lines."""
    over = {}
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                over[path.relative_to(ROOT).as_posix()] = lines
    return over


def test_files_over_600_lines_are_at_most_4_and_each_has_a_reason():
    over = files_over()
    print(f"files over {MAX_LINES} lines in {', '.join(SCANNED)}: {len(over)}")
    for path, lines in sorted(over.items(), key=lambda item: -item[1]):
        print(f"  {lines:5d} {path}: {BIG_FILES.get(path, 'NO REASON')}")
    missing = sorted(set(over) - set(BIG_FILES))
    assert not missing, f"over {MAX_LINES} lines with no entry in BIG_FILES (split it, or say why not): {missing}"
    stale = sorted(set(BIG_FILES) - set(over))
    assert not stale, f"no longer over {MAX_LINES} lines: remove their BIG_FILES entries: {stale}"
    settled = [path for path in over if BIG_FILES[path] != BEING_SPLIT]
    assert len(settled) <= MAX_FILES_OVER, f"{len(settled)} files stay over {MAX_LINES} lines: {settled}"
    assert len(over) <= MAX_FILES_OVER + sum(reason == BEING_SPLIT for reason in BIG_FILES.values())


def test_service_has_no_loose_files_and_exactly_its_four_rooms():
    loose = sorted(p.name for p in SERVICE.glob("*.py") if p.name != "__init__.py")
    rooms = {p.name for p in SERVICE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    print(f"service/: {len(loose)} loose files, rooms {sorted(rooms)}")
    assert loose == [], f"loose modules in controller/service/ (put each in a room): {loose}"
    assert rooms == SERVICE_ROOMS
    for room in sorted(SERVICE_ROOMS):
        assert (SERVICE / room / "__init__.py").is_file(), f"controller/service/{room} is not a package"
        nested = sorted(p.name for p in (SERVICE / room).iterdir() if p.is_dir() and p.name != "__pycache__")
        assert nested == [], f"controller/service/{room} has sub-packages: {nested}"
