"""How a folder becomes a :class:`~profkit.model.Run`: finding the trace files, deciding which
file is which rank's, run.json and the rank status files, NVML samples, the ingest cache, and
the short per-rank summary."""
