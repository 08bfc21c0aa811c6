"""The dependency direction of DESIGN.md, checked on the import statements themselves:

    cli -> dashboard -> analyzers -> core <- collectors
"""

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = {"collectors": REPO / "collectors", "analyzers": REPO / "analyzers",
          "dashboard": REPO / "dashboard", "core": REPO / "profkit"}
FORBIDDEN = {
    "core": {"profkit.collectors", "profkit.analyzers", "profkit.dashboard", "torch", "pynvml"},
    "collectors": {"profkit.analyzers", "profkit.dashboard", "pandas", "pyarrow"},
    "analyzers": {"profkit.collectors", "profkit.dashboard", "torch", "pynvml"},
    "dashboard": {"profkit.collectors", "torch", "pynvml"},
}
# The CLI is the one core module allowed to reach every layer (lazily, inside commands).
CLI = REPO / "profkit" / "cli.py"


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violations(layer: str) -> list[str]:
    bad = []
    for path in LAYERS[layer].rglob("*.py"):
        if path == CLI:
            continue
        for name in imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    return bad


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_dependency_direction(layer):
    assert violations(layer) == []


def test_the_check_can_fail(tmp_path, monkeypatch):
    fake = tmp_path / "collectors"
    fake.mkdir()
    (fake / "bad.py").write_text("import pandas\n")
    monkeypatch.setitem(LAYERS, "collectors", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert violations("collectors") == ["collectors/bad.py imports pandas"]
