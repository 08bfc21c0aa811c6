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
