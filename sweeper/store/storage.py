"""Where a study lives: any Optuna RDB URL (SQLite, PostgreSQL, ...) or `journal:<path>` for
Optuna's journal file (machines that share only a filesystem). Passwords are never shown."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .retry import RetryingStorage

JOURNAL_PREFIX = "journal:"


def default_storage() -> str:
    """sqlite:///outputs/sweeper.db under the working directory (made when the study is opened)."""
    return f"sqlite:///{Path.cwd() / 'outputs' / 'sweeper.db'}"


def open_storage(url: str) -> Any:
    """The storage object optuna.create_study/load_study take. Its calls are not retried until
    the sweep that opened it says how (RetryingStorage.ride_out): a wrong URL is one line at once."""
    return RetryingStorage(_opened(url), redact(url))


def _opened(url: str) -> Any:
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len(JOURNAL_PREFIX) :].removeprefix("//")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    from optuna.storages import RDBStorage

    if url.startswith("sqlite:///"):  # SQLite makes the file, not the folders above it
        folder = Path(url.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from ..errors import ConfigError

            raise ConfigError(
                f"cannot create {str(folder)!r} for the study storage ({exc.strerror}): "
                "run from a directory you can write, or set hydra.sweeper.storage."
            ) from exc
    _quiet_outage_warnings()
    # a connection is tested before each use: a restarted server's dead ones are replaced
    storage = RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    try:  # Optuna caches finished trials in front of an RDB (what create_study does with a URL)
        from optuna.storages._cached_storage import _CachedStorage
    except ImportError:
        return storage
    return _CachedStorage(storage)


def _outage_warning(record: logging.LogRecord) -> bool:
    """Optuna's RDB storage warns, traceback-long, when a query fails and it tries another way;
    with the server gone that is an outage, which RetryingStorage says in one line."""
    return not str(record.msg).startswith("Caught an error from sqlalchemy")


def _quiet_outage_warnings() -> None:
    log = logging.getLogger("optuna.storages._rdb.storage")
    if _outage_warning not in log.filters:
        log.addFilter(_outage_warning)


def storage_file(url: str) -> Path | None:
    """The file an SQLite or journal storage lives in (None: a database server's)."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX) :].removeprefix("//")).expanduser()
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def command_line(argv: Sequence[str]) -> str:
    """The sweep's command as the user typed it, any password in a storage URL left out."""
    words = []
    for word in argv:
        key, eq, value = word.partition("=")
        words.append(f"{key}={redact(value)}" if eq and "://" in value else word)
    return shlex.join(["sweeper", *words])


def dashboard_command(url: str) -> str:
    """The optuna-dashboard command line that opens this storage (its password left for you to add)."""
    if url.startswith(JOURNAL_PREFIX):
        return f"optuna-dashboard {shlex.quote(url[len(JOURNAL_PREFIX) :].removeprefix('//'))}"
    return f"optuna-dashboard {shlex.quote(redact(url))}"


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
