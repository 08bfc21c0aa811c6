"""profkit.trace.synthetic: checked on the written JSON, parsed here independently of the generator."""

import gzip
import re
import statistics
from pathlib import Path

import orjson
import pytest

from profkit import schema as S
from profkit.trace.synthetic import main, make_run

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "samples" / "runs" / "zoo" / "balanced" / "traces" / "rank0.pt.trace.json.gz"
N, GROUP, STRAGGLER, SLOW = 8, 4, 5, 1
PG_KEYS = ("Process Group Name", "Process Group Description", "Process Group Ranks",
           "Group size", "Rank")


def read(path: Path) -> dict:
    return orjson.loads(gzip.decompress(path.read_bytes()))


def rank_files(out: Path) -> list[Path]:
    return [out / f"rank{r}.pt.trace.json.gz" for r in range(len(list(out.glob("rank*"))))]


def comm_kernels(doc: dict) -> list[dict]:
    evs = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"
           and e["name"].startswith(("ncclDevKernel_", "ncclKernel_"))]
    return sorted(evs, key=lambda e: e["ts"])


def strip_pg(e: dict) -> dict:
    e = dict(e)
    if "args" in e:
        e["args"] = {k: v for k, v in e["args"].items() if k not in PG_KEYS}
    return e


@pytest.fixture(scope="module")
def source() -> dict:
    return read(SOURCE)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    plan = make_run(SOURCE, out, N, group_size=GROUP, straggler=STRAGGLER, slow_group=SLOW)
    return out, plan, [read(p) for p in rank_files(out)]


def test_source_collectives_do_not_overlap(source):
    # Precondition of the checks below: every collective of the source is an anchor.
    kern = comm_kernels(source)
    assert len(kern) == 18
    assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(kern, kern[1:]))


def test_files_and_plan(planted, source):
    out, plan, docs = planted
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted([".profkit"] + [f"rank{r}.pt.trace.json.gz" for r in range(N)])
    assert [p.name for p in (out / ".profkit").iterdir()] == ["planted.json"]
    written = orjson.loads((out / ".profkit" / "planted.json").read_bytes())
    assert written == plan
    assert plan["synthetic"] is True
    assert (plan["n_ranks"], plan["group_size"], plan["straggler"], plan["slow_group"]) == (
        N, GROUP, STRAGGLER, SLOW)
    assert plan["slow_group_ranks"] == [4, 5, 6, 7]
    for key in ("slow_factor", "jitter_frac", "straggler_frac", "seed", "repeat", "source"):
        assert key in plan


def test_headers(planted, source):
    _, _, docs = planted
    for r, doc in enumerate(docs):
        assert list(doc) == list(source) + ["hostname"]
        assert doc["hostname"] == f"node{r // GROUP:04d}"
        dist = doc["distributedInfo"]
        assert (dist["rank"], dist["world_size"], dist["pg_count"]) == (r, N, 2)
        g = r // GROUP
        pgs = {c["pg_name"]: c for c in dist["pg_config"]}
        assert set(pgs) == {"0", f"group{g}"}
        assert pgs["0"]["ranks"] == list(range(N)) and pgs["0"]["pg_size"] == N
        assert pgs[f"group{g}"]["ranks"] == list(range(g * GROUP, (g + 1) * GROUP))
        assert all(c["backend_config"] == "cuda:nccl" for c in pgs.values())


def test_collectives_end_together_and_straggler_is_late(planted):
    _, _, docs = planted
    per_rank = [comm_kernels(d) for d in docs]
    assert {len(k) for k in per_rank} == {18}
    straggler_latest = 0
    for j in range(18):
        groups: dict[str, list[int]] = {}
        for r in range(N):
            args = per_rank[r][j]["args"]
            expect = ("0", "default_pg", N) if j % 2 else (f"group{r // GROUP}", "local", GROUP)
            assert (args["Process Group Name"], args["Process Group Description"],
                    args["Group size"]) == expect
            members = orjson.loads(args["Process Group Ranks"])
            assert r in members and len(members) == args["Group size"]
            groups.setdefault(args["Process Group Name"], []).append(r)
        for members in groups.values():
            ends = [per_rank[r][j]["ts"] + per_rank[r][j]["dur"] for r in members]
            assert max(ends) - min(ends) < 0.01
        members = next(m for m in groups.values() if STRAGGLER in m)
        starts = {r: per_rank[r][j]["ts"] for r in members}
        straggler_latest += max(starts, key=starts.get) == STRAGGLER
    assert straggler_latest >= 0.8 * 18


def test_cpu_side_follows_its_kernel(planted):
    _, _, docs = planted
    for r, doc in enumerate(docs):
        ops = {e["args"]["External id"]: e for e in doc["traceEvents"]
               if e.get("name") == "record_param_comms"}
        for k in comm_kernels(doc):
            op = ops[k["args"]["External id"]]
            for key in ("Process Group Name", "Process Group Description",
                        "Process Group Ranks", "Group size"):
                assert op["args"][key] == k["args"][key]
            assert op["args"]["Rank"] == r


def test_slow_group_collectives_take_longer(planted):
    _, _, docs = planted
    per_rank = [comm_kernels(d) for d in docs]
    ratios = []
    for j in range(0, 18, 2):  # local-group collectives
        slow = statistics.median(per_rank[r][j]["dur"] for r in range(4, 8))
        fast = statistics.median(per_rank[r][j]["dur"] for r in range(0, 4))
        ratios.append(slow / fast)
    assert statistics.median(ratios) >= 2


def test_time_is_monotone_per_rank(planted, source):
    # The warp keeps the source order of events of one thread.
    _, _, docs = planted
    src_ts = [e["ts"] for e in source["traceEvents"]]
    for doc in docs:
        pairs = sorted((s, e["ts"]) for s, e in zip(src_ts, doc["traceEvents"]) if e["ph"] != "M")
        body = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        assert all(e["dur"] >= 0 for e in body)
        assert all(b[1] >= a[1] for a, b in zip(pairs, pairs[1:]) if b[0] > a[0])


def test_no_jitter_is_the_identity(tmp_path, source):
    make_run(SOURCE, tmp_path, 4, group_size=2, jitter_frac=0.0)
    expected = [strip_pg(e) for e in source["traceEvents"]]
    for path in rank_files(tmp_path):
        events = read(path)["traceEvents"]
        assert [strip_pg(e) for e in events] == expected


def test_repeat(tmp_path, source):
    make_run(SOURCE, tmp_path, 2, group_size=2, repeat=2, jitter_frac=0.0)
    src = source["traceEvents"]
    body = [e for e in src if e.get("ph") != "M" and e.get("cat") != "Trace"]
    period_us = max(e["ts"] + e.get("dur", 0) for e in body) - min(e["ts"] for e in body) + 1000
    [src_trace] = [e for e in src if e.get("cat") == "Trace"]
    for path in rank_files(tmp_path):
        events = read(path)["traceEvents"]
        assert len(events) == 2 * len(src) - (len(src) - len(body))
        second = events[len(src):]
        assert [e["ts"] for e in second] == pytest.approx(
            [e["ts"] + period_us for e in body], abs=0.002, rel=0)
        [trace] = [e for e in events if e.get("cat") == "Trace"]
        assert trace["dur"] == pytest.approx(src_trace["dur"] + period_us, abs=0.002)
        for cat in ("user_annotation", "gpu_user_annotation"):
            steps = [int(m.group(1)) for e in events if e.get("cat") == cat
                     and (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"]))]
            assert len(steps) == len(set(steps)) == 6
            assert sorted(steps) == list(range(min(steps), min(steps) + 6))
        kernels = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
        assert len(kernels) == len(set(kernels))
        starts = [e["id"] for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"]
        assert len(starts) == len(set(starts))
        assert len(comm_kernels({"traceEvents": events})) == 36


def test_workers_give_identical_bytes(tmp_path):
    kw = dict(group_size=GROUP, straggler=2, slow_group=0, seed=7)
    make_run(SOURCE, tmp_path / "one", N, workers=1, **kw)
    make_run(SOURCE, tmp_path / "two", N, workers=2, **kw)
    for name in [f"rank{r}.pt.trace.json.gz" for r in range(N)] + [".profkit/planted.json"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


@pytest.mark.parametrize("kw", [
    dict(n_ranks=6, group_size=4),
    dict(n_ranks=8, group_size=4, straggler=8),
    dict(n_ranks=8, group_size=4, straggler=-1),
    dict(n_ranks=8, group_size=4, slow_group=2),
    dict(n_ranks=8, group_size=4, repeat=0),
])
def test_bad_inputs(tmp_path, kw):
    with pytest.raises(ValueError):
        make_run(SOURCE, tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["notes.txt", "rank0.pt.trace.json.gz"])
def test_refuses_a_folder_with_other_files(tmp_path, name):
    (tmp_path / name).write_bytes(b"mine")  # a real trace is never overwritten
    with pytest.raises(ValueError):
        make_run(SOURCE, tmp_path, 2, group_size=2)
    assert (tmp_path / name).read_bytes() == b"mine"


def test_rerun_replaces_an_earlier_synthetic_run(tmp_path):
    make_run(SOURCE, tmp_path, 4, group_size=2)
    make_run(SOURCE, tmp_path, 2, group_size=2)
    assert sorted(p.name for p in tmp_path.glob("rank*")) == [
        "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]


def test_project_loader_reads_it(planted):
    from profkit.run.loader import load_run

    out, _, _ = planted
    run = load_run(out, cache=False)
    assert sorted(run.ranks) == list(range(N))
    assert run.meta["hosts"] == ["node0000", "node0001"]
    for r, data in run.ranks.items():
        assert len(data.steps) > 0 and len(data.collectives) > 0
        assert set(data.collectives[S.PG_NAME]) == {"0", f"group{r // GROUP}"}


def test_cli(tmp_path, capsys):
    assert main([str(SOURCE), str(tmp_path), "--ranks", "4", "--group-size", "2",
                 "--straggler", "3", "--slow-group", "0"]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and "4 ranks" in line
    assert main([str(SOURCE), str(tmp_path / "x"), "--ranks", "3", "--group-size", "2"]) == 2
