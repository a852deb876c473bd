"""``eugen-bench``: the benchmark protocol as data (``configs/bench/*.yaml``), run by one command, and the
README's results tables generated from ``benchmarks/*.json`` (never copied by hand)."""
