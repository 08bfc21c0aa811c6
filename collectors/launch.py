"""``profkit launch --run-dir DIR -- torchrun ...`` (also ``python -m
profkit.collectors.launch``).

Runs a command with NCCL debug logging, the PyTorch NCCL flight recorder and the profkit
run directory configured in its environment; returns the command's exit code.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from profkit.collectors.collector_errors import CollectorError
from profkit.collectors.job_facts.flight_dump import NCCL_DIR
from profkit.collectors.run_dir_writes import check_output_dir

NCCL_LOG_NAME = "rank.%h.%p.log"  # NCCL expands %h (host) and %p (pid)
FR_PREFIX = "flight_recorder_rank"  # PyTorch appends the rank on a timeout dump
DEFAULT_SUBSYS = "INIT,COLL,TUNING,GRAPH,ENV"
DEFAULT_TRACE_BUFFER = "2000"


# The flight recorder's buffer size: TORCH_FR_BUFFER_SIZE from torch 2.8 on (the recorder
# made backend-neutral, pytorch/pytorch#152563), where the old name still works but makes
# every rank warn that it is deprecated; older torch reads only the old name.
FR_BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
OLD_FR_BUFFER_ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"
FR_BUFFER_ENV_SINCE = (2, 8)


def torch_version() -> tuple[int, int] | None:
    """(major, minor) of the torch installed beside profkit, read from its package metadata
    (torch is not imported: that takes seconds); None when there is none."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def fr_buffer_env(version: tuple[int, int] | None) -> str:
    """The variable that sets the flight recorder's buffer for torch ``version``; the old
    one when the version is unknown (every torch reads it, new ones with a warning)."""
    return FR_BUFFER_ENV if version is not None and version >= FR_BUFFER_ENV_SINCE \
        else OLD_FR_BUFFER_ENV


def launch_env(run_dir: str | os.PathLike, command: Sequence[str],
               environ: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``environ`` plus the NCCL / flight-recorder / profkit
    settings. The user's own NCCL_DEBUG, NCCL_DEBUG_SUBSYS and buffer size (under either
    name) are kept; else the buffer is set under the name the installed torch reads."""
    env = dict(os.environ if environ is None else environ)
    nccl = Path(run_dir).resolve() / NCCL_DIR
    env.setdefault("NCCL_DEBUG", "INFO")
    env.setdefault("NCCL_DEBUG_SUBSYS", DEFAULT_SUBSYS)
    env["NCCL_DEBUG_FILE"] = str(nccl / NCCL_LOG_NAME)
    if FR_BUFFER_ENV not in env and OLD_FR_BUFFER_ENV not in env:
        env[fr_buffer_env(torch_version())] = DEFAULT_TRACE_BUFFER
    env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    env["TORCH_FR_DUMP_TEMP_FILE"] = str(nccl / FR_PREFIX)
    env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(nccl / FR_PREFIX)  # older PyTorch name
    env["PROFKIT_RUN_DIR"] = str(Path(run_dir).resolve())
    env["PROFKIT_LAUNCH_COMMAND"] = json.dumps(list(command))
    return env


RUN_DIR_HELP = "run directory (created if missing); the job's profile() calls default to it"
COMMAND_HELP = "the command, after '--' (e.g. -- torchrun --nproc_per_node 8 train.py)"
DESCRIPTION = ("Run a training/inference command with NCCL logging and the flight recorder "
               "writing into a profkit run directory ($PROFKIT_RUN_DIR in the job).")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="profkit launch", description=DESCRIPTION)
    p.add_argument("--run-dir", required=True, help=RUN_DIR_HELP)
    p.add_argument("command", nargs=argparse.REMAINDER, help=COMMAND_HELP)
    return p


def launch_main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the child's exit code (128+N when killed by signal N)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return launch(args.run_dir, args.command)


def launch(run_dir: str | os.PathLike, command: Sequence[str]) -> int:
    """Run ``command`` (a leading ``--`` is dropped) with the launch environment for
    ``run_dir``; the child's exit code (128+N when killed by signal N)."""
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CollectorError("no command given after '--'")
    run_dir = check_output_dir(run_dir, min_free_bytes=0)
    (run_dir / NCCL_DIR).mkdir(exist_ok=True)
    env = launch_env(run_dir, command)
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as e:
        raise CollectorError(f"cannot run {command[0]!r}: {e.strerror or e}") from e
    return _wait(proc)


def _wait(proc: subprocess.Popen) -> int:
    """Wait for the child, forwarding SIGTERM (SIGINT reaches it through the terminal's
    process group already)."""
    def forward(signum: int, frame: object) -> None:
        proc.send_signal(signum)

    try:
        prev = signal.signal(signal.SIGTERM, forward)
    except ValueError:  # not the main thread: no forwarding
        prev = None
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got SIGINT too; wait for it to save and exit
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    return 128 - rc if rc < 0 else rc


def main() -> None:
    try:
        sys.exit(launch_main())
    except CollectorError as e:
        print(f"profkit launch: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
