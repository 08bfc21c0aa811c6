"""profkit.nccl.flight_recorder on dumps built here in the shape PyTorch writes (field names from
torch/csrc/distributed/c10d/FlightRecorder.hpp, dump version 2.10)."""

from __future__ import annotations

import pickle

import pytest

from profkit.errors import TraceError
from profkit.nccl.flight_recorder import (
    ENTRY_COLUMNS,
    load_flight_recorder_dir,
    parse_flight_recorder,
    pg_config_frame,
    rank_from_name,
)


def entry(record_id, seq, state="completed", name="nccl:all_reduce", **kw):
    e = {
        "record_id": record_id, "pg_id": 0, "process_group": ("0", "default_pg"),
        "thread_name": "pt_nccl_watchdg", "thread_id": "140001",
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": name,
        "time_created_ns": 1_700_000_000_000_000_000 + record_id * 1000,
        "input_sizes": [[1024, 4]], "input_dtypes": ["Float"],
        "output_sizes": [[1024, 4]], "output_dtypes": ["Float"], "state": state,
        "time_discovered_started_ns": 1_700_000_000_000_000_500 + record_id * 1000,
        "time_discovered_completed_ns": (1_700_000_000_000_000_900 + record_id * 1000
                                         if state == "completed" else None),
        "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
    }
    if state == "completed":
        e["duration_ms"] = 0.25
    e.update(kw)
    return e


def dump(entries):
    return {"version": "2.10", "comm_lib_version": "2.21.5",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                "last_completed_collective": 2}},
            "entries": entries}


def test_entries_columns_and_values():
    data = pickle.dumps(dump([entry(0, 1), entry(1, 2, name="nccl:all_gather"),
                              entry(2, 3, state="started")]))
    df = parse_flight_recorder(data, rank=1)
    assert list(df.columns) == list(ENTRY_COLUMNS)
    assert list(df["collective"]) == ["all_reduce", "all_gather", "all_reduce"]
    assert list(df["collective_seq_id"]) == [1, 2, 3]
    assert list(df["state"]) == ["completed", "completed", "started"]
    assert set(df["rank"]) == {1}
    assert (df["pg_name"].iloc[0], df["pg_desc"].iloc[0]) == ("0", "default_pg")
    assert df["in_nelems"].iloc[0] == 4096
    assert df["time_discovered_completed_ns"].iloc[2] == -1  # None -> -1
    assert df["duration_ms"].isna().tolist() == [False, False, True]
    assert df["top_frame"].iloc[0] == "train.py:42 train_step"
    assert df["time_created_ns"].dtype == "int64"


def test_pg_config():
    pg = pg_config_frame(dump([]), rank=0)
    assert pg.to_dict("records") == [{"rank": 0, "pg_name": "0", "pg_desc": "default_pg",
                                      "ranks": "[0, 1]"}]


def test_missing_optional_fields_do_not_crash():
    data = pickle.dumps({"version": "2.3", "entries": [{"profiling_name": "nccl:send"}]})
    df = parse_flight_recorder(data)
    assert df["collective"].tolist() == ["send"]
    assert df["record_id"].tolist() == [-1]


class Evil:
    """A class reference that a safe reader must refuse to resolve."""


def test_refuses_pickled_classes():
    data = pickle.dumps({"version": "2.10", "entries": [], "x": Evil})
    with pytest.raises(pickle.UnpicklingError):
        parse_flight_recorder(data)


@pytest.mark.parametrize("name,rank", [("flight_recorder_rank3.pkl", 3),
                                       ("flight_recorder_rank12", 12), ("other.pkl", -1)])
def test_rank_from_name(name, rank):
    assert rank_from_name(name) == rank


def test_load_dir_reads_both_names_and_names_corrupt_file(tmp_path):
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    (nccl / "flight_recorder_rank0.pkl").write_bytes(pickle.dumps(dump([entry(0, 1)])))
    (nccl / "flight_recorder_rank1").write_bytes(pickle.dumps(dump([entry(0, 1), entry(1, 2)])))
    df = load_flight_recorder_dir(tmp_path)
    assert sorted(df["rank"].tolist()) == [0, 1, 1]
    (nccl / "flight_recorder_rank2.pkl").write_bytes(b"not a pickle")
    with pytest.raises(TraceError, match="flight_recorder_rank2.pkl"):
        load_flight_recorder_dir(tmp_path)
