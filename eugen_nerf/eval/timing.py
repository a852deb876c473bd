"""Honest timing: warm-up runs, device synchronisation around each measurement, median of repeats.

CUDA kernels run asynchronously, so a timer that does not synchronise measures launch time only. On the CPU
every timed call runs with denormal floats flushed to zero (:func:`cpu_denormals_flushed`), as training
does: a trained field's tiny activations otherwise slow its CPU arithmetic severalfold, and a dense field
more than its EUGen twin, which would time the CPU's denormal handling rather than the networks.
:func:`render_and_score` times rendering alone and computes metrics outside the timed region, so slow
metrics (LPIPS on CPU) never lower the reported frame rate.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

T = TypeVar("T")
S = TypeVar("S")
V = TypeVar("V")


def synchronize(device: torch.device | str) -> None:
    """Wait for queued work on ``device`` (CUDA); a no-op on CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Seconds of each timed repeat; :attr:`median` is the reported value."""

    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


CLOCKS = ("wall", "cpu")
"""What a timing counts: wall-clock seconds, or the CPU seconds of this process (every thread's). On a CPU
shared with other jobs, a one-thread run's CPU seconds are what it would take alone, where its wall-clock
seconds also count the time other jobs held the core; on CUDA only the wall clock means anything."""


@contextmanager
def cpu_denormals_flushed(device: str | torch.device) -> Iterator[None]:
    """On the CPU, flush denormal floats to zero inside the block, then return to PyTorch's default (kept).

    Late in training many gradients fall below float32's smallest normal number (about 1.2e-38). x86 CPUs
    compute with such denormals many times slower than with normal numbers, so a trained field's backward
    pass gets severalfold slower than a fresh one's; flushed to zero, they change nothing a float32 model can
    represent. GPUs flush already, so elsewhere this does nothing. The mode is the calling thread's.
    """
    if torch.device(device).type != "cpu" or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _clock(clock: str, device: torch.device | str) -> Callable[[], float]:
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    if clock == "cpu":
        if torch.device(device).type != "cpu":
            raise ValueError("the cpu clock times CPU work only: use the wall clock on CUDA")
        return time.process_time
    return time.perf_counter


def timed(fn: Callable[[], T], device: torch.device | str, clock: str = "wall") -> tuple[T, float]:
    """Run ``fn`` once between two synchronisations; return its result and the seconds it took on ``clock``
    (:data:`CLOCKS`)."""
    now = _clock(clock, device)
    with cpu_denormals_flushed(device):
        synchronize(device)
        start = now()
        result = fn()
        synchronize(device)
        seconds = now() - start
    return result, seconds


def time_inside(
    fn: Callable[[], T], modules: dict[str, torch.nn.Module], device: torch.device | str
) -> tuple[T, float, dict[str, float]]:
    """Run ``fn`` once, timing it whole and the seconds spent inside each of ``modules`` (forward hooks,
    synchronised on CUDA): where a render's time goes. Returns the result, the total seconds and the seconds
    per module name. Modules nested in one another would count twice: pass disjoint ones."""
    inside = dict.fromkeys(modules, 0.0)
    started: dict[str, float] = {}
    handles = []

    def enter(name: str):
        def hook(module, args):
            synchronize(device)
            started[name] = time.perf_counter()

        return hook

    def leave(name: str):
        def hook(module, args, output):
            synchronize(device)
            inside[name] += time.perf_counter() - started.pop(name)

        return hook

    for name, module in modules.items():
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave(name)))
    try:
        result, total = timed(fn, device)
    finally:
        for handle in handles:
            handle.remove()
    return result, total, inside


class NonFiniteOutput(ArithmeticError):
    """What was timed produced inf or NaN: its speed means nothing."""


def check_finite(result: object, name: str = "result") -> None:
    """Raise :class:`NonFiniteOutput` if any tensor in ``result`` (nested dicts/lists/tuples) is not finite."""
    if isinstance(result, torch.Tensor):
        if result.is_floating_point() and not bool(torch.isfinite(result).all()):
            bad = int((~torch.isfinite(result)).sum())
            raise NonFiniteOutput(f"{name}: {bad} of {result.numel()} values are inf/NaN; not timing it")
    elif isinstance(result, dict):
        for key, value in result.items():
            check_finite(value, f"{name}[{key!r}]")
    elif isinstance(result, (list, tuple)):
        for index, value in enumerate(result):
            check_finite(value, f"{name}[{index}]")


def benchmark(
    fn: Callable[[], object], device: torch.device | str, warmup: int = 1, repeats: int = 5
) -> Timing:
    """Time ``fn``: ``warmup`` untimed calls (lazy init, caches, autotuning), then ``repeats`` timed ones.

    The first timed call's output is checked finite (:func:`check_finite`) outside the timed region.
    """
    return benchmark_interleaved({"fn": fn}, device, warmup, repeats)["fn"]


def benchmark_interleaved(
    fns: dict[str, Callable[[], object]],
    device: torch.device | str,
    warmup: int = 1,
    repeats: int = 5,
    clock: str = "wall",
) -> dict[str, Timing]:
    """Time several variants side by side: each repeat runs every variant once, in turn.

    Load from other processes (or clock changes) then hits all variants alike, so their ratios stay
    meaningful on a shared machine, which separate back-to-back :func:`benchmark` calls do not guarantee.
    Each variant's first timed output is checked finite: a NaN network is fast and worthless. ``clock``: see
    :data:`CLOCKS`.
    """
    _clock(clock, device)  # an unknown clock, or the cpu clock on CUDA, fails before anything runs
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    timings = {name: Timing() for name in fns}
    for repeat in range(repeats):
        for name, fn in fns.items():
            result, seconds = timed(fn, device, clock)
            if repeat == 0:
                check_finite(result, name)
            timings[name].seconds.append(seconds)
            del result
    return timings


def closest_in_time(
    reference: Callable[[], object],
    candidates: dict[str, Callable[[], object]],
    device: torch.device | str,
    warmup: int = 1,
    repeats: int = 5,
    sizes: dict[str, float] | None = None,
    clock: str = "wall",
) -> tuple[str, dict[str, Timing]]:
    """The candidate whose time is closest to ``reference``'s, all timed side by side
    (:func:`benchmark_interleaved`, the reference under the key ``"reference"``); returns its key and every timing.

    How a benchmark finds "the dense twin narrowed to EUGen's speed": candidates are the dense widths. With
    ``sizes`` (each candidate's width), the candidates' median times are fitted by a straight line in the size
    and the candidate whose fitted time is nearest the reference's is chosen: on a shared machine one
    candidate's median can be off by more than neighbouring widths differ, while the fit over all of them is
    not. Without ``sizes``, the candidate with the nearest median. ``clock``: see :data:`CLOCKS`."""
    if not candidates or "reference" in candidates:
        raise ValueError("closest_in_time needs candidates, none of them named 'reference'")
    timings = benchmark_interleaved({"reference": reference, **candidates}, device, warmup, repeats, clock)
    target = timings["reference"].median
    if sizes is None or len(candidates) < 2:
        return min(candidates, key=lambda name: abs(timings[name].median - target)), timings
    if set(sizes) != set(candidates):
        raise ValueError("closest_in_time: sizes must name every candidate")
    x = torch.tensor([float(sizes[name]) for name in candidates], dtype=torch.float64)
    y = torch.tensor([timings[name].median for name in candidates], dtype=torch.float64)
    design = torch.stack([torch.ones_like(x), x], dim=1)
    fitted = design @ torch.linalg.lstsq(design, y.unsqueeze(1)).solution.squeeze(1)
    return min(zip(candidates, fitted.tolist()), key=lambda pair: abs(pair[1] - target))[0], timings


@dataclass
class ViewResults(Generic[S]):
    """Per-view render timings and metric results from :func:`render_and_score`."""

    render: list[Timing]
    scores: list[S]

    @property
    def median_seconds(self) -> float:
        """Median over views of each view's median render time."""
        return statistics.median(t.median for t in self.render)


def render_and_score(
    views: Iterable[V],
    render: Callable[[V], T],
    score: Callable[[V, T], S],
    device: torch.device | str,
    warmup: int = 1,
    repeats: int = 1,
) -> ViewResults[S]:
    """Render every view ``repeats`` times (timed) and score the last render (untimed).

    ``warmup`` untimed renders of the first view come first. ``views`` may be a progress bar.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    render_times: list[Timing] = []
    scores: list[S] = []
    for i, view in enumerate(views):
        if i == 0:
            for _ in range(warmup):
                render(view)
        timing = Timing()
        for _ in range(repeats):
            output, seconds = timed(functools.partial(render, view), device)
            timing.seconds.append(seconds)
        render_times.append(timing)
        scores.append(score(view, output))
    return ViewResults(render_times, scores)


def median_rate(counts: Sequence[float], timings: Sequence[Timing]) -> float:
    """Median over items of ``count / median seconds`` (e.g. rays per second over views)."""
    return statistics.median(count / t.median for count, t in zip(counts, timings))
