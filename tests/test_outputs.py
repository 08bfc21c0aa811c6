"""Outputs never lie or leak: a failed write names the output and leaves nothing behind, files
get the umask's mode, and temporaries of killed writers are cleaned up without touching a
live writer's."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profkit import atomic
from profkit.cli import main
from tests.factories import trace_doc, write_trace

OLD_S = 3600  # an hour: older than any staleness limit


def tiny_run(folder: Path) -> Path:
    """A 2-rank run of hand-built traces (loads and analyses in well under a second)."""
    for rank in (0, 1):
        write_trace(folder / f"rank{rank}.json", trace_doc(rank=rank, world_size=2))
    return folder


def leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(".tmp-*"))


@pytest.fixture
def umask():
    """A function that sets the process umask; the old one comes back after the test."""
    saved = os.umask(0o022)
    yield os.umask
    os.umask(saved)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# ---- modes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640)])
def test_written_files_get_the_umask_mode_like_open(tmp_path, umask, mask, expected):
    from profkit.collectors.run_dir_writes import gzip_file_atomic, write_json_atomic

    umask(mask)
    with open(tmp_path / "by-open", "wb"):
        pass
    assert mode(tmp_path / "by-open") == expected  # the reference: what open() does
    atomic.write_bytes_atomic(tmp_path / "a.bin", b"x")
    write_json_atomic(tmp_path / "run.json", {"a": 1})
    (tmp_path / "src.json").write_text("{}")
    gzip_file_atomic(tmp_path / "src.json", tmp_path / "t.json.gz")
    for name in ("a.bin", "run.json", "t.json.gz"):
        assert mode(tmp_path / name) == expected, name


def test_replacing_a_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    shared, private = tmp_path / "shared.json", tmp_path / "private.json"
    shared.write_bytes(b"old")
    shared.chmod(0o664)
    private.write_bytes(b"old")
    private.chmod(0o600)
    atomic.write_bytes_atomic(shared, b"new")
    atomic.write_bytes_atomic(private, b"new")
    assert (mode(shared), mode(private)) == (0o664, 0o600)
    assert shared.read_bytes() == private.read_bytes() == b"new"


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640)])
def test_cli_outputs_and_cache_get_the_umask_mode(tmp_path, mask, expected):
    run = tiny_run(tmp_path / "run")
    env = {**os.environ, "PROFKIT_CACHE_DIR": str(tmp_path / "home-cache")}
    shell = (f"umask {mask:03o} && {sys.executable} -m profkit merge {run} -q -o {tmp_path}/m.json.gz"
             f" && {sys.executable} -m profkit analyze {run} -o {tmp_path}/a.txt")
    proc = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cached = list((run / ".profkit" / "cache").iterdir())
    assert len(cached) >= 2 * 4 + 1  # 3 tables and a meta per trace, and the analysis
    for path in [tmp_path / "m.json.gz", tmp_path / "a.txt", *cached]:
        assert mode(path) == expected, path


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640)])
def test_capture_files_get_the_umask_mode(tmp_path, umask, mask, expected):
    torch = pytest.importorskip("torch")
    from profkit.collectors import profile

    umask(mask)
    model = torch.nn.Linear(8, 8)
    with profile(tmp_path / "run", wait=0, warmup=0, active=2, nvml=False) as prof:
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
            prof.step()
    files = sorted(p for p in (tmp_path / "run").rglob("*") if p.is_file())
    names = {str(p.relative_to(tmp_path / "run")) for p in files}
    assert {"run.json", "ranks/rank0.json", "traces/rank0.pt.trace.json.gz"} <= names
    assert {str(p.relative_to(tmp_path)): mode(p) for p in files} == \
        {str(p.relative_to(tmp_path)): expected for p in files}


# ---- a failed write ---------------------------------------------------------------------

class _FullDisk(io.FileIO):
    """A file on a disk that fills up after ``room`` bytes."""

    room = 64

    def write(self, data):
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


@pytest.fixture
def full_disk(monkeypatch):
    """Every file opened for writing from a file descriptor fills up after 64 bytes."""
    real = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        if mode == "wb":
            return io.BufferedWriter(_FullDisk(fd, "wb"), buffer_size=256)
        return real(fd, mode, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)


@pytest.mark.parametrize("command, output", [
    (["merge", "-q", "--no-cache"], "merged.json.gz"),
    (["analyze", "--no-cache", "--format", "json"], "a.json"),
])
def test_full_disk_names_the_output_and_leaves_it_as_it_was(tmp_path, capsys, full_disk,
                                                            command, output):
    run = tiny_run(tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    (out / output).write_bytes(b"the previous output")
    code = main([command[0], str(run), *command[1:], "-o", str(out / output)])
    err = capsys.readouterr().err
    assert code != 0
    assert err.strip() == f"profkit: error: cannot write {out / output}: no space left on device"
    assert (out / output).read_bytes() == b"the previous output"
    assert list(out.iterdir()) == [out / output]


def test_full_stdout_is_one_line(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    run = tiny_run(tmp_path / "run")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "profkit", "analyze", str(run), "--no-cache"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "profkit: error: cannot write standard output: no space left on device"


def test_closed_stdout_ends_quietly(tmp_path):
    """``profkit analyze RUN | head -c0``: the reader went away; no traceback, exit 141."""
    run = tiny_run(tmp_path / "run")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "profkit", "analyze", str(run), "--no-cache"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


def _try_mount(target: Path, options: str) -> str | None:
    """Mount a tmpfs at ``target``; the reason when that is not possible here, else None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    target.mkdir(exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else f"cannot mount a tmpfs: {proc.stderr.strip()}"


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KiB file system (tmpfs), skipped with the reason where it cannot be mounted."""
    target = tmp_path / "disk"
    reason = _try_mount(target, "size=256k")
    if reason:
        pytest.skip(reason)
    yield target
    subprocess.run(["umount", str(target)], check=True)


def test_real_full_disk(tmp_path, small_disk):
    run = tmp_path / "run"
    for rank in (0, 1):  # ~200 KB of events per rank, enough to fill the disk
        events = [{"ph": "X", "name": f"op{i}", "cat": "cpu_op", "ts": i, "dur": 1, "pid": 1,
                   "tid": 1} for i in range(3000)]
        write_trace(run / f"rank{rank}.json", trace_doc(rank=rank, events=events))
    (small_disk / "merged.json").write_bytes(b"the previous output")
    for output in ("merged.json", "new.json"):
        proc = subprocess.run([sys.executable, "-m", "profkit", "merge", str(run), "-q", "-o",
                               str(small_disk / output)], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert proc.stderr.strip() == \
            f"profkit: error: cannot write {small_disk / output}: no space left on device"
    assert sorted(os.listdir(small_disk)) == ["merged.json"]
    assert (small_disk / "merged.json").read_bytes() == b"the previous output"


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder no file can be created in: chmod where that binds, else (root) a read-only
    tmpfs; skipped with the reason where neither works."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").write_bytes(b"")
    except OSError:
        yield folder
        folder.chmod(0o755)
        return
    (folder / "probe").unlink()
    reason = _try_mount(folder, "ro,size=64k")
    if reason:
        pytest.skip(reason)
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def _write_error(capsys, tmp_path, output: Path) -> str:
    run = tiny_run(tmp_path / "run")
    code = main(["analyze", str(run), "--no-cache", "-o", str(output)])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    return err.strip()


def test_read_only_folder_is_one_line(tmp_path, capsys, read_only_dir):
    err = _write_error(capsys, tmp_path, read_only_dir / "a.txt")
    assert err in (f"profkit: error: cannot write {read_only_dir / 'a.txt'}: permission denied",
                   f"profkit: error: cannot write {read_only_dir / 'a.txt'}: read-only file system")


def test_output_that_is_a_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "a.txt").mkdir()
    err = _write_error(capsys, tmp_path, tmp_path / "a.txt")
    assert err == f"profkit: error: cannot write {tmp_path / 'a.txt'}: is a directory"


def test_output_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    err = _write_error(capsys, tmp_path, tmp_path / "file" / "a.txt")
    assert err.startswith(f"profkit: error: cannot write {tmp_path / 'file' / 'a.txt'}: not a directory")


def test_permission_denied_is_one_line(tmp_path, capsys, monkeypatch):
    real = os.open

    def refuse(path, flags, *args, **kwargs):
        if Path(path).name.startswith(".tmp-"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    err = _write_error(capsys, tmp_path, tmp_path / "a.txt")
    assert err == f"profkit: error: cannot write {tmp_path / 'a.txt'}: permission denied"


# ---- abandoned temporaries ---------------------------------------------------------------

def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def orphan(folder: Path, target: str, pid: int, machine: str | None = None, age_s: float = 0,
           suffix: str = "") -> Path:
    path = folder / f".tmp-{target}.{pid}-{machine or atomic.machine_tag()}.0123abcd{suffix}"
    path.write_bytes(b"half a file")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_merge_removes_what_a_killed_merge_left(tmp_path):
    run = tiny_run(tmp_path / "run")
    left = orphan(tmp_path, "merged.json.gz", dead_pid())
    legacy = tmp_path / ".tmp-merged.json.gz.k3j_x9q2"  # tempfile.mkstemp's names, an hour old
    legacy.write_bytes(b"half")
    os.utime(legacy, (time.time() - OLD_S,) * 2)
    assert main(["merge", str(run), "-q", "-o", str(tmp_path / "merged.json.gz")]) == 0
    assert not left.exists() and not legacy.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merged.json.gz", "run"]


def test_sweep_keeps_what_may_still_be_written(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        keep = [
            orphan(tmp_path, "m.json", live.pid, age_s=OLD_S),      # a live writer, however old
            orphan(tmp_path, "m.json", os.getpid(), age_s=OLD_S),   # this process
            orphan(tmp_path, "m.json", dead_pid(), machine="0badc0de"),  # another machine, recent
            tmp_path / ".tmp-notes",                                # not a name profkit writes
            tmp_path / "m.json.1234-abcdef01.0123abcd",             # not a temporary
        ]
        for path in keep[3:]:
            path.write_bytes(b"x")
            os.utime(path, (time.time() - OLD_S,) * 2)
        gone = [
            orphan(tmp_path, "m.json", dead_pid()),                              # its writer died
            orphan(tmp_path, "m.json", live.pid, machine="0badc0de", age_s=OLD_S),  # remote, old
            orphan(tmp_path, "rank0.pt.trace.json.gz", dead_pid(), suffix=".json"),  # capture
        ]
        assert atomic.sweep_stale(tmp_path) == len(gone)
        assert all(p.exists() for p in keep) and not any(p.exists() for p in gone)
    finally:
        live.kill()
        live.wait()


def test_a_live_writer_in_another_process_keeps_its_temporary(tmp_path):
    """A second process sweeping the folder while the first writes does not break the first."""
    code = ("import sys; from profkit.atomic import atomic_open\n"
            f"with atomic_open({str(tmp_path / 'out.bin')!r}) as fh:\n"
            "    fh.write(b'first half,'); fh.flush(); print('writing', flush=True)\n"
            "    sys.stdin.readline(); fh.write(b'second half')\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        (tmp,) = leftovers(tmp_path)
        os.utime(tmp, (time.time() - OLD_S,) * 2)
        assert atomic.sweep_stale(tmp_path) == 0 and tmp.exists()
        writer.communicate("go\n", timeout=60)
    finally:
        writer.kill()
    assert writer.returncode == 0
    assert (tmp_path / "out.bin").read_bytes() == b"first half,second half"
    assert leftovers(tmp_path) == []


def test_capture_start_and_cache_remove_orphans(tmp_path):
    from profkit.collectors.run_dir_writes import check_output_dir

    run = tiny_run(tmp_path / "run")
    (run / "traces").mkdir()
    capture = orphan(run / "traces", "rank0.pt.trace.json.gz", dead_pid(), suffix=".json")
    status = orphan(run, "run.json", dead_pid())
    check_output_dir(run, min_free_bytes=0)
    assert not capture.exists() and not status.exists()
    cache_dir = run / ".profkit" / "cache"
    cache_dir.mkdir(parents=True)
    entry = orphan(cache_dir, "0123456789abcdef0123.events.parquet", dead_pid())
    assert main(["analyze", str(run), "--format", "json", "-o", str(tmp_path / "a.json")]) == 0
    assert not entry.exists() and leftovers(tmp_path) == []


def test_a_capture_temporary_is_never_read_as_a_trace(tmp_path):
    from profkit.run.loader import load_run

    run = tiny_run(tmp_path / "run")
    orphan(run, "rank1.json", os.getpid(), suffix=".json")  # half a trace being written
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0, 1] and loaded.skipped == []


# ---- targets that are no regular file ------------------------------------------------------

def test_a_link_to_dev_null_stays_a_link_and_dev_null_a_device(tmp_path):
    """``-o /dev/null`` (here through a link, so that a regression cannot break this
    machine's /dev/null) is written in place: renaming a temporary over it would replace
    the device with a file."""
    out = tmp_path / "report.json"
    out.symlink_to("/dev/null")
    rc = main(["analyze", str(tiny_run(tmp_path / "run")), "--format", "json", "-o", str(out)])
    assert rc == 0
    assert out.is_symlink() and os.readlink(out) == "/dev/null"
    assert Path("/dev/null").is_char_device()
    assert not leftovers(tmp_path)


def test_a_named_pipe_gets_the_report_and_stays_a_pipe(tmp_path):
    import json
    import threading

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    rc = main(["analyze", str(tiny_run(tmp_path / "run")), "--format", "json", "-o", str(fifo)])
    reader.join(30)
    assert rc == 0
    assert fifo.is_fifo()
    assert json.loads(got[0])["run"]["world_size"] == 2
    assert not leftovers(tmp_path)


def test_only_devices_pipes_and_sockets_are_written_in_place(tmp_path):
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert atomic.is_special(Path("/dev/null"))
    assert atomic.is_special(tmp_path / "fifo")
    assert not atomic.is_special(tmp_path / "file")
    assert not atomic.is_special(tmp_path / "dir")
    assert not atomic.is_special(tmp_path / "absent")


_PROGRAM = """
import atexit, sys, threading, time
marker = sys.argv.pop(1)
atexit.register(lambda: open(marker, "a").write("atexit\\n"))
if sys.argv.pop(1) == "thread":  # a thread Python waits for at exit: the program waits too
    threading.Thread(target=lambda: (time.sleep(3), open(marker, "a").write("thread\\n"))).start()
from profkit.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("command, thread", [(["summary"], "none"), (["summary"], "thread"),
                                             (["analyze", "--no-cache"], "none"),
                                             (["analyze", "--ranks", "7"], "none")])
def test_the_program_ends_with_its_code_its_output_and_its_exit_handlers(tmp_path, command, thread):
    """The program ends without Python's teardown (cli.main._end_now), but as any exit would:
    the same code and output as main() in this process, atexit handlers run, and after a
    thread that Python would wait for."""
    run = tiny_run(tmp_path / "run")
    argv = [command[0], str(run), *command[1:]]
    marker = tmp_path / "marker"
    proc = subprocess.run([sys.executable, "-c", _PROGRAM, str(marker), thread, *argv],
                          capture_output=True, text=True, timeout=120)
    here = subprocess.run([sys.executable, "-c", "import sys; from profkit.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", *argv],
                          capture_output=True, text=True, timeout=120)  # main(argv): no fast end
    assert (proc.returncode, proc.stdout, proc.stderr) == (here.returncode, here.stdout, here.stderr)
    assert len(proc.stdout) > 100 or proc.returncode != 0
    assert marker.read_text() == ("thread\natexit\n" if thread == "thread" else "atexit\n")
