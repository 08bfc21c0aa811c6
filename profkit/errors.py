"""The ProfkitError hierarchy. Messages name the file and what is wrong; the CLI alone maps
these to exit codes."""

from __future__ import annotations

from pathlib import Path


class ProfkitError(Exception):
    """Base of every error profkit raises on purpose."""

    exit_code = 1


class UsageError(ProfkitError):
    """The user asked for something that cannot be done (bad option, missing path)."""

    exit_code = 2


class TraceError(ProfkitError):
    """A trace file cannot be read: truncated, empty, not JSON, corrupt gzip, foreign."""

    exit_code = 3

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class NoTracesError(ProfkitError):
    """A run has no readable trace at all."""

    exit_code = 4


class RunConflictError(ProfkitError):
    """Traces that cannot belong together (duplicate ranks, different runs) under --strict."""

    exit_code = 5


class IncompleteRunError(ProfkitError):
    """``profkit analyze --strict``: the report was written, but it is not about the whole
    run (the run failed or did not finish, ranks are missing, traces were skipped, or rank
    numbers were guessed from file order)."""

    exit_code = 7


def error_text(record: object) -> str:
    """A recorded error (the ``{"type", "message"}`` of run.json and ``ranks/rank{R}.json``)
    as one line, ``"RuntimeError: boom"``; the capture side writes these records and both
    it and the reader describe them this same way."""
    if not isinstance(record, dict):
        return "unknown error"
    parts = [str(record[k]) for k in ("type", "message") if record.get(k)]
    return ": ".join(parts) or "unknown error"


class OutputError(ProfkitError, OSError):
    """An output cannot be written: no space left, no permission, a read-only folder, a
    folder where the file should go. Nothing was left behind. Also an OSError (with the
    cause's ``errno``), so that callers which catch OSError around a write still do."""

    exit_code = 6

    def __init__(self, path: object, cause: OSError):
        problem = cause.strerror or str(cause)
        problem = problem[:1].lower() + problem[1:]
        if cause.filename and str(cause.filename) != str(path) \
                and not Path(str(cause.filename)).name.startswith(".tmp-"):
            problem += f" ({cause.filename})"  # a parent folder, say, rather than the file
        super().__init__(f"cannot write {path}: {problem}")
        self.path = str(path)
        self.errno = cause.errno  # not strerror: str() stays the message above
