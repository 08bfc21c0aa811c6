"""The NCCL picture: the per-rank collectives table, NCCL_DEBUG logs and flight-recorder dumps."""
