"""Import hygiene: the capture side imports neither torch (eagerly) nor pandas/pyarrow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import profkit.collectors

PKG = Path(profkit.collectors.__file__).parent
FORBIDDEN = {"pandas", "pyarrow", "profkit.analyzers", "profkit.dashboard"}
# profile(summarize=True)'s in-job summary may use the analyzers, inside functions only
# (see LAZY_EXEMPT in tests/test_architecture.py); the import test below keeps it lazy.
LAZY_EXEMPT = {"in_job/summarize.py": {"profkit.analyzers"}}
# Every module of the capture side, its sub-packages included (not the framework callbacks
# of integrations/, which import their framework).
MODULES = sorted(p for p in PKG.rglob("*.py") if "integrations" not in p.relative_to(PKG).parts)


def _dotted(path: Path) -> str:
    parts = path.relative_to(PKG).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("profkit.collectors", *parts))


def test_import_does_not_load_torch_or_pandas():
    names = ", ".join(_dotted(p) for p in MODULES)
    code = (f"import sys, {names}; "
            "bad = [m for m in ('torch', 'pandas', 'pyarrow', 'pynvml') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_no_forbidden_imports_anywhere_in_collectors():
    assert len(MODULES) > 5
    for f in MODULES:
        tree = ast.parse(f.read_text())
        exempt = LAZY_EXEMPT.get(f.relative_to(PKG).as_posix(), set())
        top = {m for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
               for m in _imports(n)}
        for mod in _imports(tree):
            if mod not in top and any(mod == b or mod.startswith(b + ".") for b in exempt):
                continue
            assert not any(mod == b or mod.startswith(b + ".") for b in FORBIDDEN), (f, mod)


def test_torch_only_imported_inside_functions():
    for f in MODULES:
        tree = ast.parse(f.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        mods = [m for n in top for m in _imports(ast.Module(body=[n], type_ignores=[]))]
        assert not [m for m in mods if m.split(".")[0] in ("torch", "pynvml")], f
