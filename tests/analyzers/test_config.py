"""Thresholds from a --config file and from [tool.profkit] of the project's pyproject.toml:
the layers and their order, errors that name the file and the key, and the result cache
keyed by the thresholds in force."""

import argparse
import contextlib
import io
import json
import shutil

import pytest
from profkit.analyzers.config import load_thresholds
from profkit.analyzers.thresholds import DEFAULT

from profkit.cli import main
from profkit.cli.analyze import _thresholds
from profkit.errors import UsageError
from tests.conftest import REPO

NW4 = REPO / "tests" / "data" / "public" / "resnet50_nw4"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_config_file_sets_any_field(tmp_path):
    cfg = write(tmp_path / "profkit.toml", "step_outlier_frac = 0.4\nshort_kernel_ns = 5000\n"
                                          "peak_tflops = 312\n")
    th = load_thresholds(cfg, None)
    assert (th.step_outlier_frac, th.short_kernel_ns, th.peak_tflops) == (0.4, 5000, 312.0)
    assert th.data_loading_frac == DEFAULT.data_loading_frac == 0.05  # the rest untouched


def test_pyproject_found_upward_and_the_config_file_beats_it(tmp_path):
    write(tmp_path / "proj" / "pyproject.toml",
          "[project]\nname = 'x'\n\n[tool.profkit]\nstep_outlier_frac = 0.3\n"
          "data_loading_frac = 0.2\n\n[[tool.profkit.classify.rule]]\n"
          "pattern = '^mine'\nclass = 'compute'\n")
    deep = tmp_path / "proj" / "src" / "pkg"
    deep.mkdir(parents=True)
    th = load_thresholds(None, deep)
    assert (th.step_outlier_frac, th.data_loading_frac) == (0.3, 0.2)
    cfg = write(tmp_path / "c.toml", "step_outlier_frac = 0.5\n")
    th = load_thresholds(cfg, deep)
    assert (th.step_outlier_frac, th.data_loading_frac) == (0.5, 0.2)
    assert load_thresholds(None, tmp_path) == DEFAULT  # no pyproject.toml at or above tmp_path


def test_explicit_options_beat_the_config_file(tmp_path):
    cfg = write(tmp_path / "c.toml", "flops_per_step = 1e12\npeak_tflops = 100\n")
    args = argparse.Namespace(config=cfg, flops_per_step=2e12, peak_tflops=None)
    th = _thresholds(args)
    assert (th.flops_per_step, th.peak_tflops) == (2e12, 100.0)


def test_an_unknown_name_names_the_file_the_key_and_the_likely_one(tmp_path):
    cfg = write(tmp_path / "c.toml", "step_outlier_fraction = 0.3\n")
    with pytest.raises(UsageError) as info:
        load_thresholds(cfg, None)
    text = str(info.value)
    assert text.startswith(f"{cfg}: unknown threshold 'step_outlier_fraction'")
    assert "did you mean step_outlier_frac?" in text and "data_loading_frac" in text


@pytest.mark.parametrize("line, problem", [
    ("short_kernel_ns = 1.5", "short_kernel_ns: expected a whole number, got 1.5 (float)"),
    ('data_loading_frac = "0.1"', "data_loading_frac: expected a number, got '0.1' (str)"),
    ("data_loading_frac = true", "data_loading_frac: expected a number, got True (bool)"),
    ("data_loading_frac = -0.1", "data_loading_frac: expected a finite number >= 0"),
    ("data_loading_frac = nan", "data_loading_frac: expected a finite number >= 0"),
    ("diff_confidence = 1.0", "diff_confidence: expected a number between 0 and 1"),
    ("peak_tflops = 0", "peak_tflops: expected a number > 0"),
    ("[data_loading_frac]\nx = 1", "data_loading_frac: expected a number, got {'x': 1} (dict)"),
])
def test_wrong_values_name_the_file_and_the_key(tmp_path, line, problem):
    cfg = write(tmp_path / "c.toml", line + "\n")
    with pytest.raises(UsageError) as info:
        load_thresholds(cfg, None)
    assert str(info.value).startswith(f"{cfg}: {problem}")


def test_bad_keys_in_pyproject_are_errors_but_a_broken_file_is_skipped(tmp_path, caplog):
    write(tmp_path / "a" / "pyproject.toml", "[tool.profkit]\ndata_loading = 0.1\n")
    with pytest.raises(UsageError, match=r"pyproject.toml \[tool.profkit\]: unknown threshold 'data_loading'"):
        load_thresholds(None, tmp_path / "a")
    write(tmp_path / "b" / "pyproject.toml", "[tool.profkit\n")  # not TOML: someone else's
    assert load_thresholds(None, tmp_path / "b") == DEFAULT
    assert "not valid TOML" in caplog.text


def analyze_json(*args) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", *map(str, args), "--format", "json"]) == 0
    return json.loads(out.getvalue())


def used_steps(report: dict) -> list[int]:
    return report["run"]["steps"]["0"]["used"]


def test_cli_layers_and_the_result_cache_follow_the_thresholds(tmp_path, monkeypatch):
    """resnet50_nw4: steps 5 (1.4x the median) and 9 (1.3x) are left out at the default
    step_outlier_frac 0.25; at 0.5 every recorded step 5-10 is used."""
    run = tmp_path / "run"
    shutil.copytree(NW4, run)
    monkeypatch.chdir(tmp_path)
    assert used_steps(analyze_json(run)) == [6, 7, 8, 10]  # analysed and cached
    write(tmp_path / "pyproject.toml", "[tool.profkit]\nstep_outlier_frac = 0.5\n")
    assert used_steps(analyze_json(run)) == [5, 6, 7, 8, 9, 10]  # not the cached report
    cfg = write(tmp_path / "strict.toml", "step_outlier_frac = 0.25\n")
    assert used_steps(analyze_json(run, "--config", cfg)) == [6, 7, 8, 10]  # file beats project


def test_cli_bad_config_is_one_line_and_writes_nothing(tmp_path, capsys):
    cfg = write(tmp_path / "c.toml", "data_loading_frac = 'high'\n")
    out = tmp_path / "report.json"
    code = main(["analyze", str(NW4), "--config", str(cfg), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err == f"profkit: error: {cfg}: data_loading_frac: expected a number, got 'high' (str)\n"


def test_the_documented_example_loads(tmp_path):
    text = (REPO / "docs" / "analysis.md").read_text()
    block = text[text.index("```toml\n# profkit.toml"):]
    block = block[len("```toml\n"):block.index("```", 3)]
    own, _, project = block.partition("# pyproject.toml")
    cfg = write(tmp_path / "profkit.toml", own)
    write(tmp_path / "proj" / "pyproject.toml", project)
    th = load_thresholds(cfg, tmp_path / "proj")
    assert (th.data_loading_frac, th.step_outlier_frac, th.short_kernel_ns,
            th.diff_min_change_frac) == (0.10, 0.40, 5000, 0.05)
