"""docs/admin.md's "Site settings the controller models" is the conformance suite's table
(tests/conformance.py render_table), row for row: a setting added to or changed in the
suite changes the docs, and the docs name no setting the suite does not run."""
from __future__ import annotations

from pathlib import Path

from tests.conformance import ALL_RELEASES, CASES, CONFIGS, render_table

HEADING = "### Site settings the controller models"
ADMIN = Path(__file__).resolve().parent.parent / "docs" / "admin.md"


def docs_table() -> str:
    lines = ADMIN.read_text().splitlines()
    start = lines.index(HEADING)
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    return "\n".join(table) + "\n"


def test_admin_md_holds_exactly_the_rendered_table():
    assert docs_table() == render_table(), "regenerate: python -m tests.conformance (see docs/admin.md)"


def test_every_case_names_a_configuration_an_expectation_and_only_releases_of_the_suite():
    for case in CASES:
        assert case.group in CONFIGS, case.key
        assert case.expected == "modelled" or case.expected == "not planned" or case.expected.startswith(
            "unmodelled:"), case.key
        assert set(case.passed_on) <= set(ALL_RELEASES), case.key
        for release, expected in case.on:
            assert release in ALL_RELEASES and expected.startswith(("waits:", "unmodelled:")), (case.key, release)


def test_an_unmodelled_case_names_a_reason_code_of_the_product():
    from controller.service.ops.unmodelled import REASONS

    for case in CASES:
        if case.expected.startswith("unmodelled:"):
            assert case.expected.split(":", 1)[1] in REASONS, case.key
