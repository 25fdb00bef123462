"""``actorllm bench``: reproducible performance figures (throughput, serving, latency, overhead).

Each module is one benchmark with a plain function that returns its figures as a dict, so
tests and notebooks call it without the CLI; ``actorllm.entrypoints.commands.bench`` wires
them to ``actorllm bench throughput|serve|latency|overhead``. Every JSON result carries the
machine, the versions, the command line and the date (:mod:`actorllm.bench.machine`).
See ``benchmarks/README.md`` for how to run them and the latest figures.
"""
