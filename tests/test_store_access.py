"""How each process opens the store: read-only commands never create, migrate or
write it; the controller refuses an older schema; `tiresias migrate` upgrades after
a backup (the way back: the backup) and `--check` changes nothing; the file is the
service user's alone. A real SQLite file throughout."""
import os
import sqlite3
import stat

import pytest

from controller.cli.main import main
from controller.service.state.store import SCHEMA_VERSION, JobRecord, Store, StoreError
from tests.pg_server import postgres_url  # noqa: F401  (fixture)


def _version_3(path) -> None:
    """Make the database at ``path`` look like one a version-3 controller wrote."""
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE decision_log DROP COLUMN cause_id")
    db.execute("ALTER TABLE preemptions DROP COLUMN decision_id")
    db.execute("ALTER TABLE pins DROP COLUMN decision_id")
    db.execute("UPDATE schema_meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()


def _stored_version(path) -> tuple[str, set]:
    db = sqlite3.connect(path)
    try:
        version = db.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'").fetchone()[0]
        columns = {row[1] for row in db.execute("PRAGMA table_info(decision_log)")}
    finally:
        db.close()
    return version, columns


@pytest.fixture
def old_db(tmp_path):
    path = tmp_path / "t.db"
    with Store(f"sqlite:///{path}") as s:
        s.save_jobs("default", [JobRecord("7", 2, 0.0, user="alice")])
    _version_3(path)
    return path


def test_read_only_command_leaves_the_schema_as_it_was(old_db):
    with pytest.raises(SystemExit) as stopped:  # as root: an admin, who reads the store
        main(["acct", "--database-url", f"sqlite:///{old_db}"])
    message = str(stopped.value.code)
    assert "run `tiresias migrate`" in message and len(message.splitlines()) == 1
    version, columns = _stored_version(old_db)
    assert version == "3" and "cause_id" not in columns  # not upgraded behind the admin's back
    with pytest.raises(StoreError, match="older than"):
        Store(f"sqlite:///{old_db}", access="read")
    assert _stored_version(old_db)[0] == "3"


def test_controller_refuses_an_older_schema(old_db):
    with pytest.raises(StoreError, match=rf"schema version 3 is older than this version's {SCHEMA_VERSION}: run `tiresias migrate`"):
        Store(f"sqlite:///{old_db}")  # the controller's (write) access
    assert _stored_version(old_db)[0] == "3"


def test_read_only_store_cannot_write_or_create(tmp_path):
    missing = tmp_path / "none.db"
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{missing}", access="read")
    assert not missing.exists()
    url = f"sqlite:///{tmp_path / 't.db'}"
    Store(url).close()
    with Store(url, access="read") as reader:
        assert reader.load_jobs("default") == {}
        with pytest.raises(StoreError, match="readonly"):
            reader.save_jobs("default", [JobRecord("1", 1, 0.0)])


def test_migrate_check_then_upgrade_with_a_backup(old_db, capsys):
    url = f"sqlite:///{old_db}"
    assert main(["migrate", "--database-url", url, "--check"]) == 1
    out = capsys.readouterr().out
    assert f"schema version 3; this version's is {SCHEMA_VERSION}: upgrade due" in out
    assert _stored_version(old_db)[0] == "3"  # --check changed nothing
    assert main(["migrate", "--database-url", url]) == 0
    out = capsys.readouterr().out
    backups = sorted(old_db.parent.glob("t.db.v3.*.bak"))
    assert len(backups) == 1 and f"backup: {backups[0]}" in out and f"schema version 3 -> {SCHEMA_VERSION}" in out
    assert stat.S_IMODE(os.stat(backups[0]).st_mode) == 0o600
    assert _stored_version(old_db)[0] == str(SCHEMA_VERSION) and "cause_id" in _stored_version(old_db)[1]
    assert _stored_version(backups[0])[0] == "3"  # the way back: the copy taken before
    with Store(url) as s:
        assert s.load_jobs("default")["7"].user == "alice"
    assert main(["migrate", "--database-url", url, "--check"]) == 0
    assert main(["migrate", "--database-url", url]) == 0 and "nothing to do" in capsys.readouterr().out


def test_store_file_is_the_service_users_alone(tmp_path):
    path = tmp_path / "state" / "t.db"
    with Store(f"sqlite:///{path}") as s:
        s.save_jobs("default", [JobRecord("1", 1, 0.0)])
        side_files = [p for p in path.parent.iterdir() if p.name != path.name]
        assert side_files  # WAL: -wal and -shm exist while the store is open
        for p in [path, *side_files]:
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


@pytest.mark.postgres
def test_postgresql_read_only_and_an_older_schema(postgres_url):  # noqa: F811
    from sqlalchemy import create_engine, text

    from controller.service.state.engine import metadata

    engine = create_engine(postgres_url)
    metadata.drop_all(engine)
    with Store(postgres_url) as writer:
        writer.save_jobs("default", [JobRecord("7", 2, 0.0, user="alice")])
    with Store(postgres_url, access="read") as reader:
        assert reader.load_jobs("default")["7"].user == "alice"
        with pytest.raises(StoreError, match="read-only transaction"):
            reader.save_jobs("default", [JobRecord("8", 1, 0.0)])
    with engine.begin() as conn:
        conn.execute(text("UPDATE schema_meta SET value = '3' WHERE key = 'schema_version'"))
    with pytest.raises(StoreError, match="run `tiresias migrate`"):
        Store(postgres_url, access="read")
    assert main(["migrate", "--database-url", postgres_url]) == 1  # pg_dump first: nothing changed
    with Store(postgres_url, access="inspect") as inspected:
        assert inspected.found_version == 3
    assert main(["migrate", "--database-url", postgres_url, "--backed-up"]) == 0
    with Store(postgres_url) as writer:
        assert writer.schema_version == SCHEMA_VERSION
    metadata.drop_all(engine)
    engine.dispose()
