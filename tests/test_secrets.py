"""The store password is never printed (issue 20, item 1): show-config and the
controller's log lines show ***; database_password_file is read only when its
owner alone can read it; a world-readable config holding a password is refused
under mode enforce and warned about otherwise."""
from __future__ import annotations

import logging
import os

import pytest

from controller.cli import main as cli
from controller.core.model import InputError
from controller.service.ops import config as config_mod
from controller.service.state.secrets import RedactingFilter, redact_url

PASSWORD = "S3cr@t-pw"
URL_WITH = "postgresql+psycopg2://tiresias:S3cr%40t-pw@127.0.0.1:1/tiresias"
URL_WITHOUT = "postgresql+psycopg2://tiresias@127.0.0.1:1/tiresias"


def write(path, text, mode):
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("args", [[], ["--yaml"]])
def test_show_config_redacts_the_password(tmp_path, capsys, args):
    cfg = write(tmp_path / "t.yaml", f"database_url: {URL_WITH}\n", 0o600)
    assert cli.main(["show-config", "--config", str(cfg), *args]) == 0
    out = capsys.readouterr()
    assert "tiresias:***@127.0.0.1" in out.out
    assert PASSWORD not in out.out + out.err and "S3cr%40t" not in out.out + out.err


def test_world_readable_config_with_a_password(tmp_path, caplog):
    cfg = write(tmp_path / "t.yaml", f"database_url: {URL_WITH}\n", 0o644)
    with caplog.at_level(logging.WARNING, logger="tiresias.config"):
        config_mod.load(str(cfg))
    assert any("world-readable" in r.getMessage() for r in caplog.records)
    enforce = write(tmp_path / "e.yaml", f"mode: enforce\ndatabase_url: {URL_WITH}\n", 0o644)
    with pytest.raises(InputError, match="world-readable"):
        config_mod.load(str(enforce))
    with pytest.raises(InputError, match="world-readable"):  # enforce given on the command line counts too
        config_mod.load(str(cfg), {"mode": "enforce"})
    os.chmod(enforce, 0o640)  # root:tiresias 0640 is the packaged layout
    assert config_mod.load(str(enforce)).mode == "enforce"


def test_password_file(tmp_path, capsys):
    secret = write(tmp_path / "pw", PASSWORD + "\n", 0o644)
    cfg = write(tmp_path / "t.yaml", f"database_url: {URL_WITHOUT}\ndatabase_password_file: {secret}\n", 0o644)
    with pytest.raises(InputError, match=r"'database_password_file'.*mode 0644: only its owner may read it"):
        config_mod.load(str(cfg))
    os.chmod(secret, 0o600)
    config = config_mod.load(str(cfg))
    assert config.store_url() == URL_WITH and PASSWORD in config.secrets()
    assert cli.main(["show-config", "--config", str(cfg)]) == 0
    assert PASSWORD not in capsys.readouterr().out


@pytest.mark.parametrize("text, needle", [
    (f"database_url: {URL_WITH}\ndatabase_password_file: PW\n", "keep it in the file only"),
    ("database_url: sqlite:////tmp/x.db\ndatabase_password_file: PW\n", "needs a PostgreSQL database_url"),
    (f"database_url: {URL_WITHOUT}\ndatabase_password_file: /nonexistent/pw\n", "cannot open"),
])
def test_password_file_misuse_is_one_line(tmp_path, text, needle):
    secret = write(tmp_path / "pw", PASSWORD + "\n", 0o600)
    cfg = write(tmp_path / "t.yaml", text.replace("PW", str(secret)), 0o600)
    with pytest.raises(InputError, match=needle) as err:
        config_mod.load(str(cfg))
    assert "\n" not in str(err.value) and PASSWORD not in str(err.value)


def test_run_logs_never_carry_the_password(tmp_path):
    """tiresias run against an unreachable PostgreSQL: the error line names the store,
    with *** for the password."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    secret = write(tmp_path / "pw", PASSWORD + "\n", 0o600)
    cfg = write(tmp_path / "t.yaml", f"mode: observe\ndatabase_url: {URL_WITHOUT}\n"
                f"database_password_file: {secret}\n", 0o600)
    proc = subprocess.run([sys.executable, "-m", "controller.cli.main", "run", "--config", str(cfg), "--once"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "127.0.0.1" in proc.stderr and PASSWORD not in proc.stderr and "S3cr%40t" not in proc.stderr


def test_redacting_filter_cleans_messages_and_tracebacks():
    record = logging.LogRecord("tiresias", logging.ERROR, __file__, 1, "connect %s failed", (URL_WITH,), None)
    try:
        raise RuntimeError(f"bad {PASSWORD}")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    RedactingFilter([PASSWORD, "S3cr%40t-pw"]).filter(record)
    text = logging.Formatter().format(record)
    assert PASSWORD not in text and "S3cr%40t" not in text and "***" in text


def test_redact_url_of_an_unparsable_url():
    assert redact_url("postgresql://u:hunter2@h:notaport/db") == "postgresql://u:***@h:notaport/db"
    assert redact_url("sqlite:////var/lib/t.db") == "sqlite:////var/lib/t.db"
