"""Where a study lives: any Optuna RDB URL (SQLite, PostgreSQL, ...) or `journal:<path>` for
Optuna's journal file (machines that share only a filesystem). Passwords are never shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

JOURNAL_PREFIX = "journal:"


def default_storage() -> str:
    """sqlite:///outputs/sweeper.db under the working directory (made when the study is opened)."""
    return f"sqlite:///{Path.cwd() / 'outputs' / 'sweeper.db'}"


def open_storage(url: str) -> Any:
    """The storage object optuna.create_study/load_study take."""
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
    return RDBStorage(url)


def dashboard_command(url: str) -> str:
    """The optuna-dashboard command line that opens this storage (its password left for you to add)."""
    import shlex

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
