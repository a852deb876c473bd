"""``eugen-bench``: the benchmark suites (:mod:`eugen_nerf.bench.suites`), their protocol as package data
(``protocols/*.yaml``), and the results tables generated from the suites' JSON (never copied by hand)."""
