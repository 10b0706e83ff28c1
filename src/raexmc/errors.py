"""The error types of bad input or configuration, each carrying the file and the record (line, member, key), so
the command line prints one line and exits with status 2."""

from __future__ import annotations

from os import PathLike

PARAMS_FILE = "params.yaml"  # what library code names; a stage run with --params names its file (in_params_file)


class RaexmcError(Exception):
    """Base class: an error the user can fix; printed as one line, exit status 2."""

    def __init__(self, message: str, path: str | PathLike | None = None, record: str | int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.record = record
        super().__init__(self.one_line())

    def __reduce__(self):
        """Rebuilt from its parts when it crosses processes (a worker's error, raised again in the parent)."""
        return type(self), (self.message, self.path, self.record)

    def one_line(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.record is None else f"{self.path}:{self.record}"
            where += ": "
        return f"{type(self).__name__}: {where}{self.message}"

    def in_params_file(self, params_path: str | PathLike) -> RaexmcError:
        """This error, naming `params_path` where it names the default PARAMS_FILE."""
        if self.path != PARAMS_FILE or str(params_path) == PARAMS_FILE:
            return self
        return type(self)(self.message, params_path, self.record)


class DataError(RaexmcError):
    """Input data is missing, malformed or inconsistent."""


class ChecksumError(DataError):
    """A downloaded or cached file does not match its pinned checksum."""


class UnsafeArchiveError(DataError):
    """An archive member would be written outside the extraction folder."""


class ConfigError(RaexmcError):
    """A parameter is missing, of the wrong type, or names something unknown."""


class SourceError(RaexmcError):
    """A download source (apt, HTTP, Google Drive) could not deliver."""


class StorageError(RaexmcError):
    """A local store cannot be written or read: a full disk, or a corrupt or unreadable MLflow database."""


class ConcurrentRunError(RaexmcError):
    """Another pipeline run holds or rewrote the workspace this stage runs in."""


class WorkerError(RaexmcError):
    """A worker process of block-parallel work died (killed, out of memory)."""


def first_line(exc: BaseException, typed: bool = False) -> str:
    """The first line of an exception's message (transformers' and SQLAlchemy's run to many lines; the first
    says what is wrong), after its type's name when `typed` (serve's answers), or that name where it has none."""
    lines = str(exc).strip().splitlines()
    return type(exc).__name__ if not lines else f"{type(exc).__name__}: {lines[0]}" if typed else lines[0]
