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


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (the default run): one worker more than the cores. About a quarter of
    the run's time the tests wait rather than compute (a browser's round trips to the
    dashboard, jobs that test timeouts, subprocesses starting), and a third worker fills
    those gaps on a 2-core machine: 655 s for the whole run against 750-763 s with two, and
    753 s with four (more servers and browsers started, more contention). An explicit
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides."""
    wanted = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if wanted:
        return int(wanted)
    return (os.cpu_count() or 1) + 1
