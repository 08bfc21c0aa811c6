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
# The one collectors module allowed to use the analyzers (and with them pandas): the optional
# in-job summary of profile(summarize=True) runs only when asked for, after profiling has
# stopped. It may import them only inside functions, never at module level, so that
# importing the capture side still loads neither.
LAZY_EXEMPT = {REPO / "collectors" / "job_summary.py": {"profkit.analyzers"}}


def imports(path: Path) -> set[str]:
    return imports_of(ast.parse(path.read_text(), str(path)))


def module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return imports_of(ast.Module(body=[n for n in tree.body if isinstance(
        n, ast.Import | ast.ImportFrom)], type_ignores=[]))


def imports_of(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _under(name: str, packages) -> bool:
    return any(name == f or name.startswith(f + ".") for f in packages)


def violations(layer: str) -> list[str]:
    bad = []
    for path in LAYERS[layer].rglob("*.py"):
        if path == CLI:
            continue
        exempt = LAZY_EXEMPT.get(path, set())
        top = module_level_imports(path) if exempt else set()
        for name in imports(path):
            if _under(name, FORBIDDEN[layer]) and not (_under(name, exempt) and name not in top):
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


def test_the_lazy_exemption_is_lazy_only(tmp_path, monkeypatch):
    fake = tmp_path / "collectors"
    fake.mkdir()
    lazy, eager = fake / "lazy.py", fake / "eager.py"
    lazy.write_text("def f():\n    import profkit.analyzers.render\n    import pandas\n")
    eager.write_text("import profkit.analyzers.render\n")
    monkeypatch.setitem(LAYERS, "collectors", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "LAZY_EXEMPT", {
        lazy: {"profkit.analyzers"}, eager: {"profkit.analyzers"}})
    assert sorted(violations("collectors")) == [
        "collectors/eager.py imports profkit.analyzers.render",
        "collectors/lazy.py imports pandas"]
