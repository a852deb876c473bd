"""Timing: warm-up is untimed, the median is reported, and metric time never enters render time."""

import time

import pytest
import torch

from eugen_nerf.eval.timing import Timing, benchmark, benchmark_interleaved, median_rate, render_and_score


def test_benchmark_warms_up_then_takes_median():
    calls = []

    def fn():
        calls.append(None)
        time.sleep(0.05 if len(calls) == 1 else 0.001)  # the first (warm-up) call is slow

    timing = benchmark(fn, "cpu", warmup=1, repeats=5)
    assert len(calls) == 6 and len(timing.seconds) == 5
    assert timing.median < 0.02
    with pytest.raises(ValueError):
        benchmark(fn, "cpu", repeats=0)


def test_median_is_robust_to_one_outlier():
    assert Timing([0.01, 0.01, 5.0]).median == 0.01
    assert median_rate([100, 200, 300], [Timing([1.0]), Timing([1.0]), Timing([100.0])]) == 100


def test_slow_metric_is_excluded_from_render_time():
    render_seconds, metric_seconds = 0.01, 0.2
    renders = []

    def render(view):
        renders.append(view)
        time.sleep(render_seconds)
        return view * 2

    def slow_metric(view, output):
        time.sleep(metric_seconds)
        return output + 1

    start = time.perf_counter()
    results = render_and_score(range(3), render, slow_metric, "cpu", warmup=2, repeats=2)
    wall = time.perf_counter() - start
    assert results.scores == [1, 3, 5]  # each view scored once, on its own render
    assert renders == [0, 0, 0, 0, 1, 1, 2, 2]  # two warm-up renders of the first view, then 2 per view
    assert wall > 3 * metric_seconds  # the metric really ran...
    assert all(len(t.seconds) == 2 for t in results.render)
    assert render_seconds <= results.median_seconds < render_seconds + 0.05  # ...but is not in render time


def test_interleaved_benchmark_alternates_variants_and_keeps_ratios():
    calls = []
    fast = lambda: calls.append("fast")
    slow = lambda: (calls.append("slow"), time.sleep(0.02))
    timings = benchmark_interleaved({"fast": fast, "slow": slow}, "cpu", warmup=1, repeats=3)
    assert calls == ["fast", "slow"] + ["fast", "slow"] * 3
    assert len(timings["slow"].seconds) == 3
    assert timings["slow"].median > timings["fast"].median + 0.015


def test_benchmarks_refuse_to_time_non_finite_outputs():
    from eugen_nerf.eval.timing import NonFiniteOutput, benchmark, benchmark_interleaved

    nan = torch.tensor([1.0, float("nan")])
    with pytest.raises(NonFiniteOutput, match="1 of 2 values"):
        benchmark(lambda: {"rgb": nan}, "cpu", warmup=0, repeats=2)
    with pytest.raises(NonFiniteOutput, match="broken"):
        benchmark_interleaved(
            {"fine": lambda: torch.ones(3), "broken": lambda: [torch.ones(1), nan * 0 + float("inf")]},
            "cpu",
            warmup=0,
            repeats=1,
        )
    assert len(benchmark(lambda: torch.ones(3), "cpu", warmup=0, repeats=2).seconds) == 2


def test_closest_in_time_picks_the_candidate_timed_nearest_the_reference(monkeypatch):
    from eugen_nerf.eval import timing

    seen = {}

    def fake_interleaved(fns, device, warmup, repeats, clock):  # the timings are given; the choice is tested
        seen.update(names=list(fns), warmup=warmup, repeats=repeats, clock=clock)
        medians = {"reference": 0.89, "128": 0.64, "144": 0.76, "160": 1.03}
        return {name: timing.Timing([medians[name]]) for name in fns}

    monkeypatch.setattr(timing, "benchmark_interleaved", fake_interleaved)
    fns = {width: (lambda: None) for width in ("128", "144", "160")}
    best, timings = timing.closest_in_time(lambda: None, fns, "cpu", warmup=2, repeats=3, clock="cpu")
    assert best == "144" and timings["reference"].median == 0.89
    assert seen == {"names": ["reference", "128", "144", "160"], "warmup": 2, "repeats": 3, "clock": "cpu"}
    with pytest.raises(ValueError, match="needs candidates"):
        timing.closest_in_time(lambda: None, {}, "cpu")
    with pytest.raises(ValueError, match="needs candidates"):
        timing.closest_in_time(lambda: None, {"reference": lambda: None}, "cpu")


def test_closest_in_time_with_sizes_fits_a_line_through_noisy_candidates(monkeypatch):
    from eugen_nerf.eval import timing

    # times grow with the width (1 s + 0.01 s a unit) with a shared machine's noise, and one candidate (48)
    # measured 0.5 s slow: the nearest median picks it, the line fitted through all of them picks 96
    widths = [str(w) for w in range(32, 161, 16)]
    noise = [0.03, 0.5, -0.04, 0.05, -0.03, 0.04, -0.05, 0.02, -0.02]
    medians = {"reference": 2.0, **{w: 1.0 + 0.01 * int(w) + e for w, e in zip(widths, noise)}}

    def fake_interleaved(fns, device, warmup, repeats, clock):
        return {name: timing.Timing([medians[name]]) for name in fns}

    monkeypatch.setattr(timing, "benchmark_interleaved", fake_interleaved)
    fns = {w: (lambda: None) for w in widths}
    assert timing.closest_in_time(lambda: None, fns, "cpu")[0] == "48"
    best, _ = timing.closest_in_time(lambda: None, fns, "cpu", sizes={w: int(w) for w in widths})
    assert best == "96"  # 1 + 0.01 * 96 = 1.96, the width whose true time is nearest 2.0
    with pytest.raises(ValueError, match="every candidate"):
        timing.closest_in_time(lambda: None, fns, "cpu", sizes={"48": 48})


def test_the_cpu_clock_counts_work_not_waiting():
    import time

    from eugen_nerf.eval.timing import benchmark_interleaved

    fns = {"sleep": lambda: time.sleep(0.05), "work": lambda: sum(i * i for i in range(200_000))}
    wall = benchmark_interleaved(fns, "cpu", warmup=0, repeats=2)
    cpu = benchmark_interleaved(fns, "cpu", warmup=0, repeats=2, clock="cpu")
    assert wall["sleep"].median >= 0.05 and cpu["sleep"].median < 0.01  # waiting costs no CPU
    assert cpu["work"].median > 0.0
    with pytest.raises(ValueError, match="clock"):
        benchmark_interleaved(fns, "cpu", clock="gpu")
    with pytest.raises(ValueError, match="wall clock on CUDA"):
        benchmark_interleaved(fns, "cuda", clock="cpu")


def test_time_inside_counts_every_call_of_each_module_and_removes_its_hooks():
    import time

    from eugen_nerf.eval.timing import time_inside

    class Sleep(torch.nn.Module):
        def forward(self, x):
            time.sleep(0.03)
            return x

    slow, fast = Sleep(), torch.nn.Identity()

    def render():
        time.sleep(0.03)  # outside the modules
        return fast(slow(slow(torch.ones(2))))

    result, total, inside = time_inside(render, {"slow": slow, "fast": fast}, "cpu")
    assert torch.equal(result, torch.ones(2))
    assert inside["slow"] >= 0.06  # both calls
    assert inside["slow"] + inside["fast"] <= total and total >= 0.09
    assert not slow._forward_hooks and not slow._forward_pre_hooks and not fast._forward_hooks
