"""profkit.nccl.logs on hand-written NCCL_DEBUG=INFO fixtures (tests/data/nccl)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from profkit.nccl.logs import TABLE_COLUMNS, load_nccl_dir, parse_nccl_log, parse_tuning
from profkit.run.runmeta import read_run_meta

DATA = Path(__file__).parent / "data" / "nccl"
RANK0 = DATA / "rank.gpu-node-01.12345.log"
RANK1 = DATA / "rank.gpu-node-01.12346.log"


@pytest.fixture(scope="module")
def tables():
    return parse_nccl_log(RANK0.read_text())


def test_every_table_has_its_columns_even_when_empty():
    out = parse_nccl_log("nothing here\n")
    assert set(out) == set(TABLE_COLUMNS)
    for name, df in out.items():
        assert list(df.columns) == list(TABLE_COLUMNS[name])
        assert len(df) == 0


def test_comm_init_lines(tables):
    comms = tables["comms"]
    assert list(comms["phase"]) == ["START", "COMPLETE"]
    row = comms.iloc[0]
    assert (row["host"], row["pid"], row["tid"], row["dev"]) == ("gpu-node-01", 12345, 12402, "0")
    assert (row["rank"], row["nranks"], row["cuda_dev"], row["bus_id"]) == (0, 4, 0, "18000")
    assert row["comm_id"] == "0x7d3b1c2f5a6e4b10"
    topo = tables["topology"].iloc[0]
    assert (topo["nnodes"], topo["local_ranks"], topo["local_rank"]) == (2, 2, 0)


def test_rings_and_trees(tables):
    rings = tables["rings"]
    assert list(rings["channel"]) == [0, 1]
    assert set(rings["nchannels"]) == {2}
    assert rings.iloc[0]["order"] == "0 1 2 3"
    trees = tables["trees"]
    assert list(trees["channel"]) == [0, 1]
    assert list(trees["up"]) == [-1, 2]
    assert list(trees["down"]) == ["1/2/-1", "1/-1/-1"]


def test_transports(tables):
    tr = tables["transports"]
    assert len(tr) == 4
    net = tr[tr["transport"] == "NET"]
    assert list(net["direction"]) == ["receive", "receive"]
    assert list(net["via"]) == ["NET/IB/0/GDRDMA", "NET/IB/1/GDRDMA"]
    p2p = tr[tr["transport"] == "P2P"].iloc[0]
    assert (p2p["src"], p2p["dst"], p2p["direction"], p2p["via"]) == (0, 1, "", "P2P/CUMEM/read")


def test_tuning_lines_numeric_and_named():
    tun = parse_tuning(RANK0.read_text())
    assert list(tun["func"]) == ["AllReduce", "AllGather"]
    assert list(tun["bytes"]) == [4194304, 16384]
    assert list(tun["algo"]) == ["Ring", "Ring"]  # "1" mapped to its name
    assert list(tun["proto"]) == ["Simple", "LL"]
    assert tun["time_us"].tolist() == pytest.approx([412.5, 18.25])
    other = parse_tuning(RANK1.read_text())
    assert (other.iloc[0]["algo"], other.iloc[0]["proto"]) == ("Tree", "LL128")


def test_coll_lines_and_bytes(tables):
    colls = tables["colls"]
    assert list(colls["func"]) == ["AllReduce", "AllGather", "Broadcast"]
    assert list(colls["op_count"]) == [0, 1, 10]  # opCount is hex in NCCL logs
    assert list(colls["bytes"]) == [4194304, 4096, 128]  # float32, bfloat16, int64
    assert list(colls["nranks"]) == [4, 4, 4]


def test_env_and_version(tables):
    env = dict(zip(tables["env"]["name"], tables["env"]["value"], strict=True))
    assert env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}
    assert tables["versions"].iloc[0]["version"] == "2.21.5+cuda12.4"


def test_load_nccl_dir_maps_global_ranks(tmp_path):
    (tmp_path / "nccl").mkdir()
    for f in (RANK0, RANK1):
        shutil.copy(f, tmp_path / "nccl" / f.name)
    run = {"ranks": {"0": {"host": "gpu-node-01", "pid": 12345},
                     "1": {"host": "gpu-node-01", "pid": 12346}}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    dump = {"version": "2.10", "pg_config": {}, "entries": [
        {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
         "profiling_name": "nccl:all_reduce", "state": "completed"}]}
    (tmp_path / "nccl" / "flight_recorder_rank1.pkl").write_bytes(pickle.dumps(dump))
    out = load_nccl_dir(tmp_path, ranks=read_run_meta(tmp_path)[0].get("ranks", {}))
    assert sorted(out["comms"]["global_rank"].unique()) == [0, 1]
    tun = out["tuning"]
    assert dict(zip(tun["file"], tun["global_rank"], strict=True))[RANK1.name] == 1
    assert list(out["flight_recorder"]["rank"]) == [1]


def test_load_nccl_dir_without_run_json_or_logs(tmp_path):
    out = load_nccl_dir(tmp_path, ranks=read_run_meta(tmp_path)[0].get("ranks", {}))
    assert len(out["tuning"]) == 0 and "global_rank" in out["tuning"]
    assert len(out["flight_recorder"]) == 0
