import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("PROFKIT_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
# Public traces gathered beside the repository (DeepSeek, ResNet-50, vLLM, SGLang, ...)
PUBLIC_CORPUS = Path(os.environ.get("PROFKIT_PUBLIC_CORPUS", REPO.parent / "corpus-public"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Keep every test's fallback cache out of the user's home."""
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path / "home-cache"))


@pytest.fixture
def profkit_main(capfd, monkeypatch):
    """``profkit_main(*ARGS, env=None)``: ``profkit ARGS`` by the program's ``main`` in this
    process, with ``env`` added to the environment, as a ``CompletedProcess`` of its exit code
    and what it (and any process it started) wrote. The interpreter's start, signals and
    closed or full output streams need the program itself: those tests run
    ``python -m profkit``."""
    import logging
    import subprocess
    import sys

    from profkit.cli import main

    def run(*args, env=None) -> subprocess.CompletedProcess:
        # main's logging set-up does nothing where pytest's handlers are in place: the
        # program's log lines go to its stderr as they would
        said = logging.StreamHandler(sys.stderr)
        said.setFormatter(logging.Formatter("profkit: %(message)s"))
        said.setLevel(logging.WARNING)
        with monkeypatch.context() as patch:
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            capfd.readouterr()
            logging.getLogger("profkit").addHandler(said)
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
            finally:
                logging.getLogger("profkit").removeHandler(said)
            out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)
    return run
