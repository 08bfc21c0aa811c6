"""Measurements turned into findings: ranked, one per cause, each with its evidence, advice and
estimated saving, consistent with the charged-time model."""
