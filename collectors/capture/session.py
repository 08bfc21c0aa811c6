"""One capture into one run directory: torch profiler + NVML sampler + run.json.

``start()`` is collective (every rank must call it at the same point); ``stop()`` is purely
local, so a rank that fails cannot hang the others, and never raises. Neither does
``step()``: a write that fails in the middle of the job (a full disk, an I/O error, a folder
gone) stops the capture and the job goes on (:mod:`~profkit.collectors.capture.losses`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from profkit.collectors.capture import other_profiler, run_claim
from profkit.collectors.capture.losses import MIN_RESERVE_BYTES, CaptureLosses, Reserve
from profkit.collectors.capture.profile_config import ProfileConfig
from profkit.collectors.capture.saved_trace import SavedTraceView, export_trace
from profkit.collectors.collector_errors import CollectorError, OutputDirError
from profkit.collectors.job_facts import dist as pdist
from profkit.collectors.job_facts import run_document
from profkit.collectors.job_facts.flight_dump import dump_flight_recorder
from profkit.collectors.nvml.sampler import NvmlSampler, init_nvml, load_nvml
from profkit.collectors.run_dir_writes import check_output_dir, write_json_atomic

log = logging.getLogger(__name__)

TRACES_DIR = "traces"
TRACE_NAME = "rank{rank}.pt.trace.json.gz"
TRACE_CYCLE_NAME = "rank{rank}.cycle{cycle}.pt.trace.json.gz"  # cycles after the first
RANKS_DIR = "ranks"
RANK_STATUS_NAME = "rank{rank}.json"


class CaptureSession:
    """Capture into ``run_dir`` with ``config``; ``repeat`` overrides the config's."""

    def __init__(self, run_dir: str | Path, config: ProfileConfig, *,
                 repeat: int | None = None, run_id: str | None = None):
        self.dir, self.config = Path(run_dir), config
        self.repeat = config.repeat if repeat is None else repeat
        self.run_id, self.steps = run_id, 0
        self.info: pdist.RankInfo | None = None
        self.doc: dict[str, Any] = {}
        self.traces: list[Path] = []
        self.prof: Any = None
        self.sampler: NvmlSampler | None = None
        self.started_ns = 0
        self.cycles = 0  # profiler cycles ended (saved or lost)
        self.first_cycle = 0  # after an earlier session of this process into the folder
        # why no torch profiler was started (another one runs in this process), or None
        self.trace_skipped: str | None = None
        self.claim = run_claim.RankClaim(self.dir)  # taken at start, held until stop
        self._stopped = False
        self.halted = False  # a write failed: capturing stopped, the job goes on
        self.losses = CaptureLosses(self.dir, 0)
        self.reserve: Reserve | None = None
        self._chunks: list[Path] = []  # the NVML chunks written, kept once the sampler stops
        self.status = run_document.STATUS_RUNNING
        self.error: dict[str, str] | None = None  # the final run.json ``error``, set by stop()
        # run.json's gpus and clock offsets, known on every rank (run.json is on rank 0's disk)
        self.run_facts: dict[str, Any] = {}
        # the job's key-value store, for the in-job summary (taken at start: see job_facts/dist.py)
        self.store: Any = None

    # ---- start -------------------------------------------------------------------------
    def start(self) -> CaptureSession:
        self.started_ns = time.time_ns()
        nvml = self._open_nvml()
        self.info = pdist.rank_info()
        self.trace_skipped = other_profiler.other_profiler()
        gathered = pdist.all_gather_object(self._local_report(nvml))
        try:
            self._raise_if_any_problem(gathered)
        except BaseException:
            self.claim.release()
            raise
        self._continue_earlier_session()
        if pdist.dist_ready():
            self.run_id = pdist.broadcast_object(self.run_id or run_document.new_run_id())
        self.run_id = self.run_id or run_document.env_run_id() or run_document.new_run_id()
        offsets = pdist.measure_clock_offsets()
        self.run_facts = {"gpus": run_document.merge_gpus([rep["gpus"] for rep in gathered]),
                          "clock_offsets_ns": offsets}
        if self.config.summarize:
            self.store = pdist.default_store()
        self.losses.rank = self.info.rank
        if self.info.rank == 0:
            self._write_initial_run_json(gathered, offsets)
        # room for the statuses on a disk that fills up (run.json twice: it and its temporary)
        run_json_bytes = len(json.dumps(self.doc, default=str)) if self.doc else 0
        self.reserve = Reserve(self.dir, self.info.rank, MIN_RESERVE_BYTES + 2 * run_json_bytes)
        try:
            self._start_sampler(nvml)
            self._start_profiler()
        except BaseException:
            self.release_reserve()
            self.claim.release()
            raise
        return self

    def _continue_earlier_session(self) -> None:
        """A session of this process wrote into this folder before: go on from it (same
        run id, the next cycle numbers, its traces listed), never over it."""
        assert self.info is not None
        earlier = run_claim.earlier_session(self.dir, self.info.rank)
        if earlier is not None:
            self.run_id = self.run_id or earlier.run_id
            self.first_cycle, self.traces = earlier.cycles, list(earlier.traces)

    def _open_nvml(self) -> Any:
        cfg = self.config.nvml
        if cfg is False or cfg is None:
            return None
        return load_nvml() if cfg is True else init_nvml(cfg)

    def _local_report(self, nvml: Any) -> dict[str, Any]:
        problem = None
        assert self.info is not None
        try:
            check_output_dir(self.dir, self.config.min_free_bytes)
            self.claim.take(self.info.rank)
        except OutputDirError as e:
            problem = str(e)
        except run_claim.ClaimRefused as e:
            problem = f"{self.dir}: {e}"
        except OSError as e:
            problem = f"{self.dir}: cannot claim the run directory ({e.strerror or e})"
        driver = ""
        if nvml is not None:
            try:
                driver = str(nvml.nvmlSystemGetDriverVersion())
            except Exception:  # noqa: BLE001
                pass
        return {"info": self.info.as_dict(), "gpus": run_document.local_gpus(self.info.host, nvml),
                "problem": problem, "driver": driver}

    def _raise_if_any_problem(self, gathered: list[dict[str, Any]]) -> None:
        assert self.info is not None
        mine = gathered[self.info.rank if len(gathered) > 1 else 0]["problem"]
        if mine:
            raise OutputDirError(str(self.dir), mine.split(": ", 1)[-1])
        for r, rep in enumerate(gathered):
            if rep["problem"]:
                raise CollectorError(f"rank {r} cannot write its run directory: {rep['problem']}")

    def _write_initial_run_json(self, gathered: list[dict[str, Any]],
                                offsets: dict[str, int]) -> None:
        assert self.info is not None and self.run_id is not None
        ranks = [rep["info"] for rep in gathered]
        self.doc = run_document.build_run_json(
            run_id=self.run_id, ranks=ranks, world_size=self.info.world_size,
            gpus=run_document.merge_gpus([rep["gpus"] for rep in gathered]),
            clock_offsets_ns=offsets, profiler=self._profiler_settings(),
            started_ns=self.started_ns, driver=gathered[0]["driver"])
        if self.trace_skipped:
            self.doc["trace_skipped"] = self.trace_skipped
        write_json_atomic(self.dir / run_document.RUN_JSON, self.doc)

    def _profiler_settings(self) -> dict[str, Any]:
        d = self.config.as_json()
        d["repeat"] = self.repeat
        return d

    def _start_sampler(self, nvml: Any) -> None:
        from profkit.collectors.nvml.dcgm import make_scraper

        assert self.info is not None
        gpus = self.config.nvml_gpus
        if gpus is None:
            gpus = (self.info.gpu_uuid,) if self.info.gpu_uuid else ()
        dcgm = make_scraper(self.config.dcgm_url, [g for g in gpus if isinstance(g, str)])
        if nvml is None and dcgm is None:
            return
        self.sampler = NvmlSampler(self.dir, self.info.rank, gpus, hz=self.config.nvml_hz,
                                   nvml=nvml, chunk_s=self.config.nvml_chunk_s, dcgm=dcgm,
                                   on_write_failure=self._nvml_write_failed)
        if not self.sampler.start():
            self.sampler = None

    def _start_profiler(self) -> None:
        import torch.profiler as tp

        if self.trace_skipped:
            self._skip_trace(self.trace_skipped)
            return
        cfg = self.config
        kwargs = dict(cfg.torch_profiler_kwargs)
        user_ready = kwargs.pop("on_trace_ready", None)
        activities = kwargs.pop("activities", None) or _default_activities()
        self.prof = tp.profile(
            activities=activities,
            schedule=tp.schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                                 repeat=self.repeat),
            on_trace_ready=lambda p: self._on_trace_ready(p, user_ready),
            record_shapes=cfg.record_shapes, profile_memory=cfg.profile_memory,
            with_flops=cfg.with_flops, with_stack=cfg.with_stack, **kwargs)
        self.prof.start()
        other_profiler.mark_started(self, self.prof)
        self._tag_trace()

    def _skip_trace(self, reason: str) -> None:
        """No torch profiler in this capture (a second one would crash the process): say
        so once, list it in the status; the NVML sampler and run.json go on."""
        log.warning("profkit: no trace captured into %s: %s; starting a second profiler "
                    "would crash the job, so the job goes on with NVML samples and run "
                    "metadata only", self.dir, reason)
        self.losses.not_captured("trace", reason, self.steps)

    def _tag_trace(self) -> None:
        """Write the run id into the trace being recorded, so ingest can tell a trace of
        another run. Kineto keeps metadata only while a cycle records, so this runs at each
        step (a cheap attribute check) and tags each cycle once."""
        import torch.profiler as tp

        action = getattr(self.prof, "current_action", None)
        recording = action in (tp.ProfilerAction.WARMUP, tp.ProfilerAction.RECORD,
                               tp.ProfilerAction.RECORD_AND_SAVE)
        if not recording:
            self._tagged = False
        elif not getattr(self, "_tagged", False) and hasattr(self.prof, "add_metadata_json"):
            self.prof.add_metadata_json("profkit_run_id", json.dumps(self.run_id))
            self._tagged = True

    def _on_trace_ready(self, prof: Any, user_ready: Any) -> None:
        """Save the cycle's trace; a failed write is recorded and stops the capture (at the
        end of this step), it never raises into the profiler's step."""
        assert self.info is not None
        cycle, self.cycles = self.first_cycle + self.cycles, self.cycles + 1
        name = (TRACE_NAME if cycle == 0 else TRACE_CYCLE_NAME).format(
            rank=self.info.rank, cycle=cycle)
        dest = self.dir / TRACES_DIR / name
        if self.halted:  # stopping after a failed write: this cycle's events are dropped
            self.losses.record("trace", dest, None, self.steps, cycle=cycle)
            return
        try:
            export_trace(prof, dest)
        except Exception as exc:  # noqa: BLE001 - a full disk, Kineto's silent failure, ...
            self.losses.record("trace", dest, exc, self.steps, cycle=cycle)
            return
        self.traces.append(dest)
        if user_ready is not None:
            try:
                user_ready(SavedTraceView(prof, dest))  # Kineto saves a trace only once
            except OSError as exc:  # the user's own output; profkit's capture goes on
                log.warning("profkit: the on_trace_ready handler could not write (%s)", exc)

    # ---- step / stop -------------------------------------------------------------------
    def step(self) -> None:
        """End a step. Never raises: a profiler or a write that fails stops the capture."""
        if self.prof is not None:
            try:
                self._yield_to_other_profiler()
            except Exception as exc:  # noqa: BLE001
                self.losses.record("profiler", None, exc, self.steps)
        if self.prof is not None:
            try:
                self.prof.step()
                self._tag_trace()
            except Exception as exc:  # noqa: BLE001 - the profiler must not stop the job
                self.losses.record("profiler", None, exc, self.steps)
        self.steps += 1
        if self.losses.halt_due():
            self.halt()

    def _yield_to_other_profiler(self) -> None:
        """Another profiler started while ours waits between cycles (the autograd profiler
        is on, and not by us): stop ours before its next cycle would start beside it."""
        import torch.profiler as tp

        if (getattr(self.prof, "current_action", None) == tp.ProfilerAction.NONE
                and other_profiler.recording_now()):
            self._stop_profiler()
            self.trace_skipped = "another torch profiler started recording in this process"
            if self.doc:  # rank 0: run.json says so with its final status
                self.doc["trace_skipped"] = self.trace_skipped
            self._skip_trace(self.trace_skipped)

    def halt(self) -> None:
        """Stop capturing after a failed write, keep the job going: the profiler stops (a
        cycle it was recording is dropped and listed as lost), the sampler saves what it
        can and stops, and the status files say what is lost, written now (the disk may
        fill further before the job ends)."""
        if self.halted or self._stopped:
            return
        self.halted = True
        self.status = run_document.STATUS_INCOMPLETE
        for what, fn in (("profiler", self._stop_profiler), ("nvml", self._stop_sampler)):
            try:
                fn()
            except Exception:  # noqa: BLE001 - stopping must not fail the job either
                log.debug("profkit: stopping the %s after a failed write failed", what,
                          exc_info=True)
        self._write_status(None, ended_ns=None)

    def _nvml_write_failed(self, path: Path, exc: BaseException, samples: int) -> None:
        """The sampler's chunk could not be written (called on the sampler's thread)."""
        self.losses.record("nvml", path, exc, self.steps, samples=samples)

    def stop(self, exc: BaseException | None = None,
             error: dict[str, str] | None = None) -> None:
        """Stop everything, export what was captured, write the final status. Never raises;
        idempotent (a signal handler and ``__exit__`` may both call it)."""
        if self._stopped or self.info is None:
            return
        self._stopped = True
        error = error or run_document.error_dict(exc)
        internal = self._stop_parts()
        if error is None and internal:
            error = internal[0]
        if error:
            self.status = run_document.STATUS_FAILED
        elif self.losses.stopped:
            self.status = run_document.STATUS_INCOMPLETE
        else:
            self.status = run_document.STATUS_OK
        self.error = error
        self._write_status(error, ended_ns=time.time_ns())
        run_claim.remember_session(self.dir, self.info.rank, run_claim.EarlierSession(
            str(self.run_id), self.first_cycle + self.cycles, list(self.traces)))
        self.claim.release()

    def _stop_parts(self) -> list[dict[str, str]]:
        errors = []
        parts = (("profiler", self._stop_profiler), ("nvml", self._stop_sampler),
                 ("flight recorder", self._dump_flight_recorder))
        for what, fn in parts:
            try:
                fn()
            except OSError as e:  # a failed write: lost, not a failure of the job
                self.losses.record(what, getattr(e, "path", None), e, self.steps)
            except Exception as e:  # noqa: BLE001 - keep saving the other parts
                log.error("profkit: saving the %s output failed", what, exc_info=True)
                errors.append({"type": f"profkit.{what}", "message": repr(e)})
                # listed as lost, so that the analysis says why the rank has no trace
                self.losses.record("trace" if what == "profiler" else what, None, e,
                                   self.steps, after_capture=True)
        return errors

    def _stop_profiler(self) -> None:
        if self.prof is not None:
            prof, self.prof = self.prof, None
            other_profiler.mark_stopped(self)
            step_range = getattr(prof, "step_rec_fn", None)
            if step_range is not None and getattr(step_range, "record", None) is None:
                # An exception (Ctrl-C, a user's alarm) cut the profiler's step between the
                # end of one step's range and the start of the next: that range was never
                # entered, and stop() would fail closing it, losing the whole trace.
                prof.step_rec_fn = None
            prof.stop()

    def _stop_sampler(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            try:
                sampler.stop()
            finally:
                self._chunks = list(sampler.chunks_written)

    def _dump_flight_recorder(self) -> None:
        assert self.info is not None
        if not self.halted:  # a stopped capture writes nothing more but its status
            dump_flight_recorder(self.dir, self.info.rank)

    def _write_status(self, error: dict[str, str] | None, ended_ns: int | None) -> None:
        """This rank's status file (and rank 0's run.json): the outcome, what was written
        and what was lost. On a full disk the reserve makes room. Never raises."""
        assert self.info is not None
        chunks = self.sampler.chunks_written if self.sampler else self._chunks
        status = {**self.info.as_dict(), "run_id": self.run_id, "status": self.status,
                  "error": error, "started_ns": self.started_ns, "ended_ns": ended_ns,
                  "steps": self.steps, "traces": [p.name for p in self.traces],
                  "nvml_chunks": [p.name for p in chunks], **self.losses.as_status()}
        write = self.reserve.write if self.reserve is not None else (lambda fn: fn())
        path = self.dir / RANKS_DIR / RANK_STATUS_NAME.format(rank=self.info.rank)
        try:
            write(lambda: write_json_atomic(path, status))
            if self.info.rank == 0 and self.doc:
                self.doc.update(status=self.status, error=error, ended_ns=ended_ns)
                write(lambda: write_json_atomic(self.dir / run_document.RUN_JSON, self.doc))
        except Exception as exc:  # noqa: BLE001
            log.error("profkit: writing the run status to %s failed (%s)", self.dir, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))

    def record_lost(self, what: str, path: Path | None, exc: BaseException) -> None:
        """A write after the capture (the in-job report) failed: list it in the status. The
        status stays as it was: the capture itself is whole (``profkit analyze`` makes the
        report again)."""
        self.losses.record(what, path, exc, self.steps, after_capture=True)
        self._write_status(self.error, ended_ns=self.doc.get("ended_ns") or time.time_ns())

    def release_reserve(self) -> None:
        """Give the reserve's space back (the capture is over)."""
        if self.reserve is not None:
            self.reserve.release()


def _default_activities() -> list[Any]:
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    return acts

