"""profile() takes the torch.profiler conventions: schedule=torch.profiler.schedule(...) and
a user on_trace_ready (tensorboard_trace_handler included)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.profiler as tp
from profkit.collectors import CollectorError, profile
from profkit.collectors.capture.profile_config import schedule_params


def train(p, steps):
    model = torch.nn.Linear(8, 8)
    for _ in range(steps):
        model(torch.randn(2, 8)).sum().backward()
        p.step()


def profiler_steps(trace_reader, path):
    return sorted(n for n in trace_reader.names(trace_reader.read(path))
                  if n.startswith("ProfilerStep#"))


@pytest.mark.parametrize("kwargs,expected", [
    ({"wait": 1, "warmup": 1, "active": 3, "repeat": 1}, (1, 1, 3, 1)),
    ({"wait": 2, "warmup": 1, "active": 2, "repeat": 3}, (2, 1, 2, 3)),
    ({"wait": 1, "warmup": 1, "active": 2}, (1, 1, 2, 0)),  # torch's default: repeat forever
    ({"wait": 0, "warmup": 0, "active": 1, "repeat": 0}, (0, 0, 1, 0)),
    # one cycle: skip_first 10 + wait 5 are the same 15 steps without a trace
    ({"skip_first": 10, "wait": 5, "warmup": 1, "active": 3, "repeat": 1}, (15, 1, 3, 1)),
])
def test_schedule_params(kwargs, expected):
    params = schedule_params(tp.schedule(**kwargs))
    assert tuple(params.values()) == expected
    assert list(params) == ["wait", "warmup", "active", "repeat"]


def test_schedules_that_cannot_be_expressed_are_refused():
    with pytest.raises(CollectorError, match="skip_first=10 with more than one cycle"):
        schedule_params(tp.schedule(skip_first=10, wait=5, warmup=1, active=3, repeat=2))
    with pytest.raises(CollectorError, match="saves no trace"):
        schedule_params(lambda step: tp.ProfilerAction.NONE)
    grows = {0: "RECORD_AND_SAVE", 2: "RECORD_AND_SAVE", 3: "RECORD", 4: "RECORD_AND_SAVE"}
    with pytest.raises(CollectorError, match="not of the"):
        schedule_params(lambda s: tp.ProfilerAction[grows.get(s, "NONE")])


def test_same_steps_as_stock_torch_profiler(tmp_path, trace_reader):
    def sched():
        return tp.schedule(skip_first=2, wait=1, warmup=1, active=2, repeat=1)

    stock = tmp_path / "stock.json"
    with tp.profile(activities=[tp.ProfilerActivity.CPU], schedule=sched(),
                    on_trace_ready=lambda p: p.export_chrome_trace(str(stock))) as p:
        train(p, 8)
    with profile(tmp_path / "run", schedule=sched(), nvml=False) as p:
        train(p, 8)
    ours = tmp_path / "run" / "traces" / "rank0.pt.trace.json.gz"
    with open(stock) as f:
        stock_steps = sorted(e["name"] for e in json.load(f)["traceEvents"]
                             if e.get("name", "").startswith("ProfilerStep#"))
    assert stock_steps == ["ProfilerStep#4", "ProfilerStep#5"]
    assert profiler_steps(trace_reader, ours) == stock_steps
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (doc["profiler"]["wait"], doc["profiler"]["active"]) == (3, 2)


def test_repeating_schedule_writes_one_trace_per_cycle(tmp_path):
    with profile(tmp_path, schedule=tp.schedule(wait=1, warmup=0, active=1, repeat=2),
                 nvml=False) as p:
        train(p, 6)
    names = sorted(f.name for f in (tmp_path / "traces").iterdir())
    assert names == ["rank0.cycle1.pt.trace.json.gz", "rank0.pt.trace.json.gz"]


def test_tensorboard_trace_handler_still_writes_its_file(tmp_path):
    tb = tmp_path / "tb"
    with profile(tmp_path / "run", wait=0, warmup=1, active=1, nvml=False,
                 on_trace_ready=tp.tensorboard_trace_handler(str(tb), worker_name="w0")) as p:
        train(p, 3)
    assert [f.name.split(".")[0] for f in tb.iterdir()] == ["w0"]
    assert (tmp_path / "run" / "traces" / "rank0.pt.trace.json.gz").exists()
