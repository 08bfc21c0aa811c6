"""Reading one trace file: bytes with a size bound, JSON repaired where one value is bad, events
decoded into typed records and validated, and turned into the columnar tables of one rank.
Also the synthetic traces that the benchmarks and scale tests build from a real one."""
