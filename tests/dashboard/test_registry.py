"""Runs under opaque keys, rescans, and the server-side result cache."""

import os

from profkit.dashboard.server.registry import RunRegistry, is_run_folder, run_key
from profkit.dashboard.server.results import ResultCache, UnknownRun

from tests.factories import trace_doc, write_trace


def make_run(folder, ranks=(0,)):
    for r in ranks:
        write_trace(folder / f"rank{r}.json", trace_doc(rank=r, world_size=len(ranks)))
    return folder


def test_roots_are_scanned_for_run_folders_and_rescanned(tmp_path):
    make_run(tmp_path / "a")
    make_run(tmp_path / "group" / "b")
    (tmp_path / "notes").mkdir()
    reg = RunRegistry([], [tmp_path])
    assert sorted(e.label for e in reg.entries()) == ["a", "group/b"]
    make_run(tmp_path / "c")
    assert "c" not in [e.label for e in reg.entries()]
    assert "c" in [e.label for e in reg.rescan()]


def test_keys_are_opaque_and_resolve_only_to_configured_runs(tmp_path):
    run = make_run(tmp_path / "runs" / "a")
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    reg = RunRegistry([run], [])
    (entry,) = reg.entries()
    assert entry.key.startswith("a-") and "/" not in entry.key
    assert reg.get(entry.key).path == run.resolve()
    for bogus in ("../secret.json", "..%2Fsecret.json", str(secret), "a", "", None, 3):
        assert reg.get(bogus) is None


def test_same_label_different_paths_get_different_keys(tmp_path):
    assert run_key("x", tmp_path / "1") != run_key("x", tmp_path / "2")


def test_run_folder_detection(tmp_path):
    assert not is_run_folder(tmp_path)
    (tmp_path / "run.json").write_text("{}")
    assert is_run_folder(tmp_path)


def test_results_are_cached_until_a_file_of_the_run_changes(tmp_path):
    run = make_run(tmp_path / "a", ranks=(0, 1))
    results = ResultCache(RunRegistry([run], []))
    key = results.registry.entries()[0].key
    first = results.analysis(key)
    assert results.analysis(key) is first
    trace = run / "rank1.json"
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert results.analysis(key) is not first


def test_unknown_keys_raise(tmp_path):
    results = ResultCache(RunRegistry([make_run(tmp_path / "a")], []))
    try:
        results.analysis("../a")
    except UnknownRun:
        pass
    else:
        raise AssertionError("an unknown key must not resolve")


def test_lru_drops_the_oldest(tmp_path):
    results = ResultCache(RunRegistry([], []), max_items=2)
    for i in range(3):
        results.get_or_compute(("x", i), lambda i=i: i)
    assert results.peek("x", 0) is None and results.peek("x", 2) == 2


def test_runs_page_rescans_its_roots_on_every_load(tmp_path):
    from profkit.dashboard.pages import runs as page_runs

    make_run(tmp_path / "a")
    results = ResultCache(RunRegistry([], [tmp_path]))
    assert "a" in str(page_runs.layout(results)) and "late" not in str(page_runs.layout(results))
    make_run(tmp_path / "late")
    assert "late" in str(page_runs.layout(results))
