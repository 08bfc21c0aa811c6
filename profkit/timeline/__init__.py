"""``profkit merge``: every rank's trace in one Perfetto-ready timeline, and the time window a
--steps or --window option selects."""
