"""The dependency direction of DESIGN.md and docs/architecture.md, checked on the import
statements themselves.

Between the top-level packages::

    cli -> dashboard -> analyzers -> core <- collectors

Inside core (``profkit/``), the analyzers, the dashboard and the collectors, each layer below
may import only its own layer and the layers before it in the list.
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
# The CLI is the one core package allowed to reach every layer (lazily, inside commands).
CLI = REPO / "profkit" / "cli"
# The one collectors module allowed to use the analyzers (and with them pandas): the optional
# in-job summary of profile(summarize=True) runs only when asked for, after profiling has
# stopped. It may import them only inside functions, never at module level, so that
# importing the capture side still loads neither.
LAZY_EXEMPT = {REPO / "collectors" / "in_job" / "summarize.py": {"profkit.analyzers"}}

# Sub-package order: (package prefix, its layers from the bottom up). A layer is a list of
# module-name prefixes relative to the package; "." is the package's own top-level modules.
INNER = {
    "profkit": ["*base*", "classify", "nccl", "trace", "run", "timeline", "cli"],
    "profkit.analyzers": ["*base*", "measure", "findings", "*pipeline*", "compare", "report",
                          "api"],
    # charts and page blocks know nothing of requests or runs on disk; the server side knows
    # nothing of how a page looks; the pages put the two together
    "profkit.dashboard": ["*base*", "figures", "ui", "timeline", "server", "pages", "app"],
    # The entry points profile() and launch sit above the parts they compose; the framework
    # callbacks (collectors/integrations/, shipped as profkit.integrations) above those.
    "profkit.collectors": ["*base*", "job_facts", "nvml", "tools", "capture", "in_job",
                           "*api*", "integrations"],
}
# Top-level modules of a package that are not its base layer.
NAMED = {"profkit": {"__main__": "cli"},
         "profkit.analyzers": {"analyze": "*pipeline*", "summaries": "*pipeline*",
                               "executor": "*pipeline*", "measurements": "*pipeline*",
                               "api": "api"},
         "profkit.dashboard": {"app": "app"},
         "profkit.collectors": {"profile": "*api*", "launch": "*api*"}}
# Lazy imports (inside a function) allowed against the inner order: a notebook's display of
# an Analysis or a Diff draws it with the report's HTML.
INNER_LAZY_EXEMPT = {("profkit.analyzers.analyze", "profkit.analyzers.report.html"),
                     ("profkit.analyzers.compare.diff", "profkit.analyzers.report.html")}


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
            # "from profkit.run import loader" imports the module profkit.run.loader
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _under(name: str, packages) -> bool:
    return any(name == f or name.startswith(f + ".") for f in packages)


def violations(layer: str) -> list[str]:
    bad = []
    for path in LAYERS[layer].rglob("*.py"):
        if path.is_relative_to(CLI):
            continue
        exempt = LAZY_EXEMPT.get(path, set())
        top = module_level_imports(path) if exempt else set()
        for name in sorted(imports(path)):
            if _under(name, FORBIDDEN[layer]) and not (_under(name, exempt) and name not in top):
                bad.append(f"{path.relative_to(REPO)} imports {name}")
    return bad


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[0] != "profkit":
        parts = ["profkit", *parts]  # analyzers/ ships as profkit.analyzers
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def inner_layer(module: str, package: str) -> int | None:
    """The index of ``module``'s layer in ``INNER[package]``; None outside the package."""
    if not module.startswith(package + "."):
        return None
    rest = module[len(package) + 1:].split(".")
    order = INNER[package]
    if rest[0] in order:
        return order.index(rest[0])
    if any(rest[0] == p.rsplit(".", 1)[-1] for p in INNER if p.startswith(package + ".")):
        return None  # a nested package with its own order
    return order.index(NAMED.get(package, {}).get(rest[0], "*base*"))


def inner_violations(package: str, files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        me = module_name(path)
        mine = inner_layer(me, package)
        if mine is None:
            continue
        top = module_level_imports(path)
        for name in sorted(imports(path)):
            theirs = inner_layer(name, package)
            if theirs is None or theirs <= mine:
                continue
            if name not in top and any(me == m and _under(name, {e})
                                       for m, e in INNER_LAZY_EXEMPT):
                continue
            bad.append(f"{path.relative_to(REPO)} ({INNER[package][mine]}) imports {name} "
                       f"({INNER[package][theirs]})")
    return bad


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_dependency_direction(layer):
    assert violations(layer) == []


# Where each package of INNER lies in the checkout (package-dir of pyproject.toml).
FOLDERS = {"profkit": "profkit", "profkit.analyzers": "analyzers",
           "profkit.dashboard": "dashboard", "profkit.collectors": "collectors"}


@pytest.mark.parametrize("package", sorted(INNER))
def test_sub_package_direction(package):
    root = REPO / FOLDERS[package]
    assert inner_violations(package, sorted(root.rglob("*.py"))) == []


def test_every_sub_package_says_what_it_owns():
    for init in [init for folder in FOLDERS.values()
                 for init in (REPO / folder).glob("*/__init__.py")]:
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 8, f"{init.relative_to(REPO)}: no docstring"


def test_modules_are_short():
    long = [f"{p.relative_to(REPO)}: {n} lines" for d in ("profkit", "analyzers", "dashboard",
                                                          "collectors")
            for p in (REPO / d).rglob("*.py") if (n := len(p.read_text().splitlines())) > 420]
    assert long == []


def test_the_check_can_fail(tmp_path, monkeypatch):
    fake = tmp_path / "collectors"
    fake.mkdir()
    (fake / "bad.py").write_text("import pandas\n")
    monkeypatch.setitem(LAYERS, "collectors", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert violations("collectors") == ["collectors/bad.py imports pandas"]


def fake_package(tmp_path: Path, monkeypatch, folder: str, texts: dict[str, str]) -> list[Path]:
    """A checkout in ``tmp_path`` whose ``folder`` holds one module per {path: text}; the
    checks read it as the repository. Its modules, sorted."""
    for rel, text in texts.items():
        (tmp_path / folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    return sorted((tmp_path / folder).rglob("*.py"))


def test_the_inner_check_can_fail(tmp_path, monkeypatch):
    files = fake_package(tmp_path, monkeypatch, "analyzers", {
        "measure/m.py": "from profkit.analyzers.findings import advice\n",
        "findings/m.py": "from profkit.analyzers.measure import charge\n",
        "compare/m.py": "def f():\n    from profkit.analyzers.report import render\n"})
    assert inner_violations("profkit.analyzers", files) == [
        "analyzers/compare/m.py (compare) imports profkit.analyzers.report (report)",
        "analyzers/compare/m.py (compare) imports profkit.analyzers.report.render (report)",
        "analyzers/measure/m.py (measure) imports profkit.analyzers.findings (findings)",
        "analyzers/measure/m.py (measure) imports profkit.analyzers.findings.advice (findings)"]


def test_the_dashboard_check_can_fail(tmp_path, monkeypatch):
    files = fake_package(tmp_path, monkeypatch, "dashboard", {
        "figures/m.py": "from profkit.dashboard.pages import frame\n",
        "ui/m.py": "from profkit.dashboard.server import results\n",
        "pages/m.py": "from profkit.dashboard import app\n",
        "ids.py": "from profkit.dashboard.ui import grids\n"})
    assert inner_violations("profkit.dashboard", files) == [
        "dashboard/figures/m.py (figures) imports profkit.dashboard.pages (pages)",
        "dashboard/figures/m.py (figures) imports profkit.dashboard.pages.frame (pages)",
        "dashboard/ids.py (*base*) imports profkit.dashboard.ui (ui)",
        "dashboard/ids.py (*base*) imports profkit.dashboard.ui.grids (ui)",
        "dashboard/pages/m.py (pages) imports profkit.dashboard.app (app)",
        "dashboard/ui/m.py (ui) imports profkit.dashboard.server (server)",
        "dashboard/ui/m.py (ui) imports profkit.dashboard.server.results (server)"]


def test_the_collectors_inner_check_can_fail(tmp_path, monkeypatch):
    files = fake_package(tmp_path, monkeypatch, "collectors", {
        "job_facts/m.py": "from profkit.collectors.capture import session\n",
        "nvml/m.py": "from profkit.collectors.in_job.store import put\n",
        "in_job/m.py": "def f():\n    from profkit.collectors import launch\n",
        "capture/m.py": "from profkit.collectors.nvml import sampler\n"})
    assert inner_violations("profkit.collectors", files) == [
        "collectors/in_job/m.py (in_job) imports profkit.collectors.launch (*api*)",
        "collectors/job_facts/m.py (job_facts) imports profkit.collectors.capture (capture)",
        "collectors/job_facts/m.py (job_facts) imports profkit.collectors.capture.session "
        "(capture)",
        "collectors/nvml/m.py (nvml) imports profkit.collectors.in_job.store (in_job)",
        "collectors/nvml/m.py (nvml) imports profkit.collectors.in_job.store.put (in_job)"]


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




def advice_outside_findings(root: Path = REPO) -> list[str]:
    """Findings and their advice are made in analyzers/findings alone: nowhere else is a
    Finding constructed or a recommendation written."""
    bad = []
    for d in ("analyzers", "profkit", "dashboard"):
        for path in (root / d).rglob("*.py"):
            if path.is_relative_to(root / "analyzers" / "findings"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                    bad.append(f"{path.relative_to(root)}:{node.lineno} builds a Finding")
                if isinstance(node, ast.keyword) and node.arg == "recommendation":
                    bad.append(f"{path.relative_to(root)}:{node.lineno} writes advice")
    return bad


def test_findings_are_made_in_one_place():
    assert advice_outside_findings() == []


def test_the_findings_check_can_fail(tmp_path):
    for d in ("analyzers/measure", "analyzers/findings", "profkit", "dashboard"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "analyzers/measure/m.py").write_text(
        "Finding(category='x', severity='info', message='m', recommendation='do')\n")
    (tmp_path / "analyzers/findings/f.py").write_text("Finding(recommendation='fine here')\n")
    assert advice_outside_findings(tmp_path) == [
        "analyzers/measure/m.py:1 builds a Finding", "analyzers/measure/m.py:1 writes advice"]


def listed_package_folders(root: Path = REPO) -> set[Path]:
    """The folders of the packages that pyproject.toml lists for a (non-editable) build."""
    from profkit.projectconf import toml_parser

    tool = toml_parser().loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = tool["package-dir"]
    folders = set()
    for name in tool["packages"]:
        mapped = max((p for p in where if name == p or name.startswith(p + ".")), key=len)
        rest = name[len(mapped):].lstrip(".").split(".") if name != mapped else []
        folders.add((root / where[mapped]).joinpath(*rest).resolve())
    return folders


def test_every_package_folder_is_built():
    """A sub-package missing from pyproject's list works in a checkout (an editable install
    finds it) but is left out of the wheel."""
    listed = listed_package_folders()
    missing = [str(init.parent.relative_to(REPO))
               for d in ("profkit", "analyzers", "dashboard", "collectors")
               for init in (REPO / d).rglob("__init__.py") if init.parent.resolve() not in listed]
    assert missing == []
