"""Every count docs/ quotes from a bench is registered in bench/docs_figures.py, which
reruns the bench (minutes, on the public traces); here, on every run, each registered
quote must still be on its page and name a bench that exists."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import docs_figures

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("figure", docs_figures.FIGURES, ids=lambda f: f.quote[:40])
def test_each_registered_figure_is_on_its_page_and_its_bench_exists(figure):
    assert figure.quote in docs_figures.page_text(figure.page), f"{figure.page} no longer says {figure.quote!r}"
    assert (ROOT / figure.command[0]).is_file(), figure.command
    assert figure.printed and all(figure.printed)


def test_a_changed_quote_is_caught(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("the bench printed\n0 of 12 here")
    monkeypatch.setattr(docs_figures, "ROOT", tmp_path)
    assert "0 of 12" in docs_figures.page_text("page.md") and "printed 0 of" in docs_figures.page_text("page.md")
    assert "0 of 13" not in docs_figures.page_text("page.md")
