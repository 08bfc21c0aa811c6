"""The capture the framework callbacks share, with a fake profile(): where it writes, and
that it captures once and ends on success, on an error and at interpreter exit."""

from __future__ import annotations

import pytest
from profkit.integrations import capture as capture_mod
from profkit.integrations.capture import TrainerCapture


class FakeProfile:
    def __init__(self, out_dir, **kwargs):
        self.out_dir, self.kwargs, self.calls = out_dir, kwargs, []

    def __enter__(self):
        self.calls.append("enter")
        return self

    def step(self):
        self.calls.append("step")

    def __exit__(self, exc_type, exc, tb):
        self.calls.append(("exit", exc_type, exc))


@pytest.fixture
def made(monkeypatch):
    made = []

    def fake_profile(out_dir, **kwargs):
        made.append(FakeProfile(out_dir, **kwargs))
        return made[-1]

    monkeypatch.setattr(capture_mod, "profile", fake_profile)
    monkeypatch.delenv("PROFKIT_RUN_DIR", raising=False)
    return made


def test_run_dir_precedence(tmp_path, monkeypatch, made):
    assert TrainerCapture(None, {}).resolve_dir(tmp_path / "out") == tmp_path / "out" / "profkit"
    monkeypatch.setenv("PROFKIT_RUN_DIR", str(tmp_path / "launched"))
    assert TrainerCapture(None, {}).resolve_dir(tmp_path / "out") == tmp_path / "launched"
    assert TrainerCapture(tmp_path / "mine", {}).resolve_dir(tmp_path / "out") == tmp_path / "mine"


def test_start_step_stop_once(tmp_path, made):
    cap = TrainerCapture(tmp_path, {"active": 2})
    cap.start(None)
    cap.step()
    cap.step()
    cap.stop()
    cap.start(None)  # a second train() on the same callback does not overwrite the run
    cap.step()
    cap.stop()
    assert len(made) == 1 and made[0].kwargs == {"active": 2}
    assert made[0].calls == ["enter", "step", "step", ("exit", None, None)]
    assert cap.dir == tmp_path


def test_error_and_exit_without_end_hook(tmp_path, made, monkeypatch):
    boom = ValueError("boom")
    cap = TrainerCapture(tmp_path, {})
    cap.start(None)
    cap.stop(boom)
    assert made[0].calls[-1] == ("exit", ValueError, boom)
    cap2 = TrainerCapture(tmp_path, {})
    cap2.start(None)
    monkeypatch.setattr(capture_mod.sys, "last_value", KeyError("k"), raising=False)
    cap2._at_exit()  # what atexit runs when train() raised and nobody called stop()
    kind, exc = made[1].calls[-1][1:]
    assert kind is KeyError and exc.args == ("k",)
    cap2._at_exit()
    assert made[1].calls.count(made[1].calls[-1]) == 1  # ended once only
