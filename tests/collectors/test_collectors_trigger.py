"""On-demand capture: file and signal triggers; idle steps build no torch profiler."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from profkit.collectors import CollectorError, profile
from profkit.collectors.capture.trigger import FileTrigger, SignalTrigger, make_trigger


@pytest.fixture
def profiler_count(monkeypatch):
    """Counts torch.profiler.profile constructions."""
    made = []
    real = torch.profiler.profile

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)

    monkeypatch.setattr(torch.profiler, "profile", counting)
    return made


def touch_newer(path):
    st = path.stat() if path.exists() else None
    path.touch()
    if st is not None:  # make sure the mtime changes even on coarse file systems
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def captures(out):
    return sorted(p for p in out.iterdir() if p.name.startswith("capture-"))


def test_file_trigger_captures_after_touch(tmp_path, profiler_count):
    out, flag = tmp_path / "out", tmp_path / "go"
    model = torch.nn.Linear(8, 8)
    with profile(out, wait=0, warmup=1, active=2, nvml=False, trigger=f"file:{flag}",
                 trigger_every=2) as p:
        for _ in range(6):
            model(torch.randn(2, 8))
            p.step()
        assert profiler_count == []
        assert not out.exists() or captures(out) == []
        touch_newer(flag)
        for _ in range(2 + 3):  # up to 2 steps to notice, then 3 steps of capture
            model(torch.randn(2, 8))
            p.step()
        assert p.session is None  # idle again
        for _ in range(10):
            p.step()
    assert profiler_count == [1]
    (cap,) = captures(out)
    assert cap.name.startswith("capture-0-")
    doc = json.loads((cap / "run.json").read_text())
    assert doc["status"] == "ok" and doc["profiler"]["repeat"] == 1
    assert (cap / "traces" / "rank0.pt.trace.json.gz").exists()


def test_file_present_at_start_does_not_fire(tmp_path, profiler_count):
    flag = tmp_path / "go"
    flag.touch()
    with profile(tmp_path / "out", nvml=False, trigger=f"file:{flag}", trigger_every=1) as p:
        for _ in range(5):
            p.step()
    assert profiler_count == []


def test_signal_trigger_and_handler_restored(tmp_path, profiler_count):
    before = signal.getsignal(signal.SIGUSR1)
    out = tmp_path / "out"
    with profile(out, wait=0, warmup=0, active=1, steps_on_trigger=2, nvml=False,
                 trigger="signal") as p:
        p.step()
        assert profiler_count == []
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(4):
            p.step()
        os.kill(os.getpid(), signal.SIGUSR1)
        p.step()
    assert profiler_count == [1, 1]
    assert [c.name.split("-")[1] for c in captures(out)] == ["0", "1"]
    statuses = [json.loads((c / "run.json").read_text())["status"] for c in captures(out)]
    assert statuses == ["ok", "ok"]  # the second capture was cut short by exit: still saved
    assert signal.getsignal(signal.SIGUSR1) == before


def test_make_trigger():
    assert make_trigger(None) is None
    assert isinstance(make_trigger("signal"), SignalTrigger)
    ft = make_trigger("file:/tmp/x", every=5)
    assert isinstance(ft, FileTrigger) and ft.every == 5
    with pytest.raises(CollectorError):
        make_trigger("file:")
    with pytest.raises(CollectorError):
        make_trigger(3)


def test_file_trigger_checks_only_every_n_steps(tmp_path, monkeypatch):
    ft = FileTrigger(tmp_path / "go", every=10)
    stats = []
    real = ft._mtime
    monkeypatch.setattr(ft, "_mtime", lambda: stats.append(1) or real())
    for step in range(1, 31):
        ft.poll(step)
    assert len(stats) == 3
