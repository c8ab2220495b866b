"""The fleet: pytest-xdist workers, one per GPU, handed the work a cell at a time, and one result from many of them;
past one host, a plan's shards (docs/suite.md, docs/nightly.md).

One module per job: ``plugin`` the xdist hooks that join the workers' results (``FleetPlugin``); ``scheduling`` which
worker gets which cell, costliest first; ``timeline`` where each process's time went; ``warm_up`` each process's
one-off costs, paid while it waits; ``benchmark_files`` pytest-benchmark's files written whole; ``workers`` each
worker's share of the cores, bound at import, and ``-n`` checked against the GPUs; ``shard`` a night past one host:
a plan's data and what each of its shards runs (pytest-free; its plugin is suite/shard_plugin.py). Each worker's GPU
is bound by suite/device.py, outside this package: suite/options.py reads it, and this package imports options. This
file imports nothing, so that importing one of them imports none of the others, the hooks least of all.
"""
