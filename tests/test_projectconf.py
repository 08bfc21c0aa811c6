"""TOML settings (--config, --classify, [tool.profkit]) on Python 3.10, which has no
tomllib: profkit reads them with tomli there (a dependency for Python < 3.11)."""

from __future__ import annotations

import sys

import pytest

from profkit.errors import UsageError
from profkit.projectconf import read_toml, toml_parser

TOML = 'step_outlier_frac = 0.4\n[tool.profkit]\nshort_kernel_ns = 5000\n'


@pytest.fixture
def without_tomllib(monkeypatch):
    """This interpreter as Python 3.10 is: ``import tomllib`` fails."""
    monkeypatch.setitem(sys.modules, "tomllib", None)


def test_tomli_is_used_where_tomllib_is_missing(tmp_path, without_tomllib):
    pytest.importorskip("tomli")
    parser = toml_parser()
    assert parser.__name__ == "tomli"
    path = tmp_path / "profkit.toml"
    path.write_text(TOML)
    assert read_toml(path, "the config file", "config files") == {
        "step_outlier_frac": 0.4, "tool": {"profkit": {"short_kernel_ns": 5000}}}
    path.write_text("step_outlier_frac = ")  # tomli's own error is a UsageError too
    with pytest.raises(UsageError, match="not valid TOML"):
        read_toml(path, "the config file", "config files")


def test_the_cli_options_work_without_tomllib(tmp_path, without_tomllib, capsys):
    pytest.importorskip("tomli")
    from profkit.analyzers.config import load_thresholds

    from profkit.classify.rules import load_rules

    (tmp_path / "profkit.toml").write_text("step_outlier_frac = 0.4\n")
    assert load_thresholds(tmp_path / "profkit.toml", None).step_outlier_frac == 0.4
    (tmp_path / "rules.toml").write_text('[[rule]]\npattern = "^my_a2a"\nclass = "communication"\n')
    assert load_rules(tmp_path / "rules.toml", tmp_path)


def test_neither_parser_is_one_clear_error(tmp_path, without_tomllib, monkeypatch):
    monkeypatch.setitem(sys.modules, "tomli", None)
    assert toml_parser() is None
    (tmp_path / "profkit.toml").write_text(TOML)
    with pytest.raises(UsageError, match="config files need a TOML parser: Python 3.11 or "
                                         "newer, or pip install tomli"):
        read_toml(tmp_path / "profkit.toml", "the config file", "config files")


def test_the_dependency_is_declared_for_python_3_10():
    from profkit.projectconf import toml_parser as parse
    from tests.conftest import REPO

    doc = parse().loads((REPO / "pyproject.toml").read_text())
    assert "tomli>=2; python_version<'3.11'" in doc["project"]["dependencies"]
    assert doc["project"]["requires-python"] == ">=3.10"
