"""Where a study lives: any Optuna RDB URL (SQLite, PostgreSQL, ...) or `journal:<path>` for
Optuna's journal file (machines that share only a filesystem). Passwords are never shown."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

JOURNAL_PREFIX = "journal:"
# a RUNNING trial whose sweep sent no heartbeat for GRACE_S is failed by the next sweep, on any host
HEARTBEAT_S = 30
GRACE_S = 120


def default_storage() -> str:
    path = Path.cwd() / "outputs" / "sweeper.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def open_storage(url: str) -> Any:
    """The object or URL optuna.create_study/load_study take."""
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len(JOURNAL_PREFIX):].removeprefix("//")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    import warnings

    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import RDBStorage

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeats: stable since Optuna 2.x
        return RDBStorage(url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)


def stale_trial_ids(storage: Any, study_id: int) -> list[int]:
    """RUNNING trials whose heartbeat is older than the grace period (what Optuna's
    fail_stale_trials would fail; we label them before failing them)."""
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

    if not isinstance(storage, BaseHeartbeat) or not is_heartbeat_enabled(storage):
        return []
    return list(storage._get_stale_trial_ids(study_id))


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int | None, interval_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Tell the storage, while a trial runs, that its sweep is alive (storages that can hear it)."""
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

    if trial_id is None or not isinstance(storage, BaseHeartbeat) or not is_heartbeat_enabled(storage):
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                storage.record_heartbeat(trial_id)
            except Exception:  # noqa: BLE001 - a missed beat must not stop a measurement
                pass
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url

    if url.startswith(JOURNAL_PREFIX):
        return False
    try:
        return make_url(url).password is not None
    except Exception:  # noqa: BLE001 - not a database URL
        return False


def password_of(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    if not has_password(url):
        return None
    return str(make_url(url).password)


def redact(url: str) -> str:
    """The URL without its password, for anything printed or written."""
    from sqlalchemy.engine import make_url

    if not has_password(url):
        return url
    return make_url(url).render_as_string(hide_password=True)


def scrub_files(directory: Path, url: str) -> None:
    """Hydra writes the command line (storage URL included) into .hydra/*.yaml: remove the
    password from every text file sweeper or Hydra wrote under `directory`."""
    secret = password_of(url)
    if not secret:
        return
    from urllib.parse import quote_plus

    for path in directory.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".log", ".json", ".txt", ".csv", ".html"):
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            cleaned = text.replace(secret, "***").replace(quote_plus(secret), "***")
            if cleaned != text:
                path.write_text(cleaned)
