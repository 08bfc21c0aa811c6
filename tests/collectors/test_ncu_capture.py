"""``profkit ncu`` end to end on CPU, with a stand-in for the ncu binary (a script that runs
the command and answers ``--import`` with a real H100 CSV from samples/runs/why/ncu): what
is stored and where, what the analysis makes of it, and every way it degrades (no ncu, no
permission, an AMD GPU, nothing measured, a failing command), always leaving the run as it
was. The real thing runs in test_ncu_gpu.py (marked gpu)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from profkit.collectors.tools import ncu_capture as capture

from tests.factories import trace_doc, write_trace

REPO = Path(__file__).resolve().parents[2]
WHY = REPO / "samples" / "runs" / "why"
FAKE = r'''#!{python}
"""A stand-in for ncu: FAKE_NCU_MODE ok | perm | perm_query | nothing | fail."""
import os, subprocess, sys
mode = os.environ.get("FAKE_NCU_MODE", "ok")
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler"); print("Version 2025.3.1.0 (fake)")
    sys.exit(0)
if args[:1] == ["--query-metrics"]:
    if mode == "perm_query":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", file=sys.stderr)
        sys.exit(1)
    print(open(os.environ["FAKE_NCU_QUERY"]).read()); sys.exit(0)
if args[:1] == ["--import"]:
    print(open(os.environ["FAKE_NCU_CSV"]).read()); sys.exit(0)
opts, i = {{}}, 0
while i < len(args) and args[i].startswith("--"):
    if args[i] == "--force-overwrite":
        i += 1
        continue
    opts[args[i]] = args[i + 1]; i += 2
with open(os.environ["FAKE_NCU_ARGV"], "w") as f:
    f.write("\n".join(args))
log = open(opts["--log-file"], "w")
log.write("==PROF== Connected to process 1\n")
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
          "Performance Counters on the target device 0.", file=sys.stderr)
rc = subprocess.call(args[i:])
if mode == "nothing":
    log.write("==WARNING== No kernels were profiled.\n")
elif mode == "fail":
    log.write("==ERROR== The application returned an error code (3).\n")
    rc = 3
elif mode == "ok":
    open(opts["--export"] + ".ncu-rep", "wb").write(b"NCU-REP fake")
sys.exit(rc)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake ncu's path; its argv lands in ``fake.argv``."""
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(0o755)
    query = tmp_path / "query.txt"
    query.write_text("\n".join(
        f"{n}  Counter  byte  fake" for n in ("gpu__time_duration", "dram__bytes_read",
                                             "dram__bytes_write", "dram__throughput",
                                             "sm__throughput", "sm__pipe_fma_cycles_active",
                                             "sm__pipe_tensor_op_hmma_cycles_active")))
    monkeypatch.setenv("FAKE_NCU_QUERY", str(query))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.txt"))
    monkeypatch.setenv("FAKE_NCU_CSV", str(WHY / "ncu" / "eltwise_chain.csv"))
    return path


@pytest.fixture
def run(tmp_path):
    dest = tmp_path / "eltwise_chain"
    shutil.copytree(WHY / "eltwise_chain", dest, ignore=shutil.ignore_patterns(".profkit"))
    return dest


def digest(run: Path) -> dict[str, str]:
    """Every file of the run but profkit's own cache and ncu/, by content."""
    return {str(p.relative_to(run)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()
            and not {".profkit", "ncu"} & set(p.relative_to(run).parts)}


JOB = ["--", sys.executable, "-c",
       "import os; print('job ran, profile off =', os.environ.get('PROFKIT_PROFILE_OFF'))"]


def test_measures_the_top_kernels_and_stores_them_beside_the_run(run, fake, tmp_path, profkit_main):
    before = digest(run)
    done = profkit_main("ncu", run, "--ncu", fake, "--max-kernels", "3", *JOB)
    assert done.returncode == 0, done.stderr
    assert "job ran, profile off = 1" in done.stdout  # the job's own profile() records nothing
    assert "measuring 3 kernel(s) x 3 launch(es)" in done.stderr and "expect about" in done.stderr
    assert sorted(p.name for p in (run / "ncu").iterdir()) == [
        "counters.csv", "ncu.json", "ncu.log", "report.ncu-rep"]
    assert digest(run) == before and not list(run.rglob(".tmp-*"))
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--kernel-name-base") + 1] == "mangled"
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"
    assert argv[argv.index("--launch-skip") + 1] == "2"  # 2 steps of the rarest (1 call/step)
    assert argv[argv.index("--launch-count") + 1] == "3"
    assert argv[argv.index("--kernel-name") + 1].count("|") == 2  # one pattern a kernel
    meta = json.loads((run / "ncu" / "ncu.json").read_text())
    assert meta["schema"] == "profkit.ncu/1" and meta["launches"] == 16
    assert len(meta["kernels"]) == 3 and meta["kernels"][0]["calls_per_step"] == 3
    assert "stall_long_scoreboard" in meta["metrics_missing"]  # this ncu does not know them
    assert ".tmp-" not in " ".join(meta["ncu_argv"])

    report = json.loads(profkit_main("analyze", run, "--format", "json").stdout)
    top = {k["name"] for k in report["top_kernels"]}
    measured = report["ncu_kernels"]
    assert len(measured) == 13 and {k["kernel"] for k in measured} <= top
    assert all(k["measured_bound"] == "memory" for k in measured)
    assert any(f["category"] == "hbm_roof" for f in report["findings"])
    text = profkit_main("analyze", run).stdout
    assert "Nsight Compute counters (16 launches of 13 kernel(s)" in text


def test_measuring_again_replaces_only_an_earlier_measurement(run, fake, profkit_main):
    assert profkit_main("ncu", run, "--ncu", fake, *JOB).returncode == 0
    assert profkit_main("ncu", run, "--ncu", fake, "-k", "layer_norm", *JOB).returncode == 0
    meta = json.loads((run / "ncu" / "ncu.json").read_text())
    assert [k["name"] for k in meta["kernels"]] == [
        n for n in [k["name"] for k in meta["kernels"]] if "layer_norm" in n] and meta["kernels"]
    shutil.rmtree(run / "ncu")
    (run / "ncu").mkdir()
    (run / "ncu" / "notes.txt").write_text("mine")
    done = profkit_main("ncu", run, "--ncu", fake, *JOB)
    assert done.returncode != 0 and (run / "ncu" / "notes.txt").read_text() == "mine"


def test_dry_run_prints_the_command_and_writes_nothing(run, fake, profkit_main):
    done = profkit_main("ncu", run, "--ncu", fake, "--dry-run", "--launches", "2",
                   "--launch-skip", "5", *JOB)
    assert done.returncode == 0, done.stderr
    assert "--launch-count 2" in done.stdout and "--launch-skip 5" in done.stdout
    assert "job ran, profile off = 1" not in done.stdout and not (run / "ncu").exists()


def test_dry_run_needs_no_ncu(run, profkit_main, monkeypatch, tmp_path):
    """The plan and its command, with plain `ncu` and a note, where no ncu is installed."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu anywhere on it
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    done = profkit_main("ncu", run, "--dry-run", *JOB)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ncu ") and "--launch-count" in done.stdout
    assert "not found" in done.stderr and not (run / "ncu").exists()
    assert profkit_main("ncu", run, *JOB).returncode != 0  # measuring still needs it


@pytest.mark.parametrize("mode, expected", [
    ("perm", "NVreg_RestrictProfilingToAdminUsers=0"),
    ("perm_query", "CAP_SYS_ADMIN"),
    ("nothing", "ncu measured no kernel"),
    ("fail", "exited with code 3"),
])
def test_a_failed_measurement_leaves_the_run_as_it_was(run, fake, mode, expected, profkit_main):
    assert profkit_main("ncu", run, "--ncu", fake, *JOB).returncode == 0
    earlier = (run / "ncu" / "ncu.json").read_text()
    before = digest(run)
    done = profkit_main("ncu", run, "--ncu", fake, *JOB, env={"FAKE_NCU_MODE": mode})
    assert done.returncode == 9 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert digest(run) == before and (run / "ncu" / "ncu.json").read_text() == earlier
    assert not list(run.rglob(".tmp-*"))


def test_no_ncu_names_what_to_install(run, tmp_path, monkeypatch, profkit_main):
    monkeypatch.setattr(capture.glob, "glob", lambda pattern: [])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/ncu").exists():
        pytest.skip("this machine has ncu in /usr/local/cuda")
    with pytest.raises(capture.NcuError, match="Nsight Compute") as info:
        capture.find_ncu()
    assert info.value.exit_code == 9 and "--ncu" in str(info.value)
    done = profkit_main("ncu", run, "--ncu", tmp_path / "nowhere" / "ncu", *JOB)
    assert done.returncode == 9 and "Install Nsight Compute" in done.stderr
    assert not (run / "ncu").exists()


def test_an_amd_run_points_to_rocprofiler_compute(tmp_path, fake, profkit_main):
    doc = trace_doc(rank=0, world_size=1, deviceProperties=[
        {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 2**37, "numSms": 304}])
    write_trace(tmp_path / "amd" / "rank0.json", doc)
    done = profkit_main("ncu", tmp_path / "amd", "--ncu", fake, *JOB)
    assert done.returncode == 9 and "rocprof-compute" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert capture.is_amd(["AMD Instinct MI250X"]) and not capture.is_amd(["NVIDIA H100"])


def test_usage_errors(run, fake, profkit_main):
    done = profkit_main("ncu", run, "--ncu", fake)
    assert done.returncode == 2 and "name the command" in done.stderr
    done = profkit_main("ncu", run, "--ncu", fake, "-k", "no_such_kernel", *JOB)
    assert done.returncode == 2 and "no kernel matching no_such_kernel" in done.stderr


def test_skip_counts_steps_of_the_rarest_kernel():
    kernels = [{"name": "a", "calls_per_step": 3.0}, {"name": "b", "calls_per_step": 2.0}]
    assert capture.default_skip(kernels, 2) == 4
    assert capture.default_skip([{"name": "c", "calls_per_step": 0.5}], 2) == 2
    assert capture.default_skip(kernels, 0) == 1


def test_profile_records_nothing_when_turned_off(tmp_path, monkeypatch):
    from profkit.collectors import profile
    from profkit.collectors.profile import OFF_ENV

    assert OFF_ENV == capture.OFF_ENV
    monkeypatch.setenv(OFF_ENV, "1")
    with profile(tmp_path / "run") as prof:
        for _ in range(3):
            prof.step()
    assert prof.step_num == 3 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_stopping_it_leaves_the_run_as_it_was(run, fake, tmp_path, signum):
    import signal
    import time

    before = digest(run)
    proc = subprocess.Popen(
        [sys.executable, "-m", "profkit", "ncu", str(run), "--ncu", str(fake), "--",
         sys.executable, "-c", "import time; time.sleep(120)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "argv.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # ncu (the fake) is running the command
    time.sleep(0.5)
    proc.send_signal(getattr(signal, signum))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "Traceback" not in err
    assert digest(run) == before and not (run / "ncu").exists()
    assert not list(run.rglob(".tmp-*"))


def test_a_command_failing_after_the_measurement_keeps_it(run, fake, profkit_main):
    done = profkit_main("ncu", run, "--ncu", fake, "--", sys.executable, "-c", "raise SystemExit(3)")
    assert done.returncode == 0 and "exited with code 3 under ncu" in done.stderr
    assert json.loads((run / "ncu" / "ncu.json").read_text())["command_exit_code"] == 3
