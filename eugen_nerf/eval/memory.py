"""Render memory: the memory that rendering one test view takes, measured the same way for every model.

A process's peak memory says little about a model: it includes loading the run, the dataset, other models
and whatever the allocator kept from earlier work. So each model is measured in a fresh process that loads
the run, then measures only the render of one test view:

* on CUDA, the allocator's peak above what was allocated just before the render
  (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``);
* on the CPU, the resident set's high-water mark above the resident set just before the render (``VmHWM``
  reset through ``/proc/self/clear_refs``), with glibc's mmap threshold fixed at 64 KiB
  (``MALLOC_MMAP_THRESHOLD_``) so that large tensor buffers are mapped and unmapped on demand instead of
  being recycled from memory that loading left behind.

No warm-up render runs first: a warm-up's freed buffers would be reused and hide what a render needs. The
merged (fused) inference form of EUGen layers is built before the measurement, as loading is.

The model is a trained run (its ``config.yml``), or, with ``scene``, a method's configuration saved as YAML
and built with its initial weights on that scene (what a render costs depends on the model's shapes, not its
weights; the ``inference`` benchmark measures every head this way). ``size`` renders the test view at that
width in pixels, its intrinsics rescaled (:func:`view_at_size`).
``python -m eugen_nerf.eval.memory CONFIG [--view N] [--size PX] [--scene DIR] [--device D]`` is the child
process; it prints one JSON line. With ``--breakdown`` it says instead where the memory goes: the tensors alive
at the render's peak, each with the operation and source line that made it (:class:`LiveTensors`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import traceback
import weakref
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from eugen_nerf.eval.size import PeakMemory
from eugen_nerf.eval.timing import synchronize
from eugen_nerf.inputs.options import resolve_device

KINDS = ("cuda_allocated_delta", "rss_delta_fresh_process")
"""What ``render_memory_kind`` can say: the CUDA allocator's delta, or the resident set's delta on the CPU."""

_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONWARNINGS": "ignore"}


class LiveTensors(TorchDispatchMode):
    """The bytes held by the tensors that operations create while the mode is on, exactly: every new storage
    is counted when an operation returns it and uncounted when it is freed. ``peak`` is the largest total and
    ``at_peak`` what was alive then, as ``{"op @ file:line shape dtype": bytes}`` (the source line is the
    innermost one outside torch). Tensors that existed before (weights, inputs) are not counted: the figure is
    what the work in the mode adds, the allocator's own overhead aside."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[int, str]] = {}
        self.current = self.peak = 0
        self.at_peak: dict[str, int] = {}

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, (0, ""))[0]

    @staticmethod
    def _where() -> str:
        for frame in reversed(traceback.extract_stack()[:-3]):
            if "/torch/" not in frame.filename:
                return f"{'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno}"
        return "?"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in inputs or key in self._live or storage.nbytes() == 0:
                continue  # a view or an in-place result: nothing new
            name = f"{func.overloadpacket.__name__} @ {self._where()} {tuple(tensor.shape)} {tensor.dtype}"
            self._live[key] = (storage.nbytes(), name)
            self.current += storage.nbytes()
            weakref.finalize(storage, self._free, key)
            if self.current > self.peak:
                self.peak = self.current
                totals: Counter = Counter()
                for size, what in self._live.values():
                    totals[what] += size
                self.at_peak = dict(totals)
        return out


def _resident_bytes() -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    return int(match.group(1)) * 1024 if match else 0


class _NoLPIPS(torch.nn.Module):
    """Stands in for torchmetrics' LPIPS while measuring: a render needs no metric, and building the stock
    one would download its backbone where the offline weights are not set up."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, *args, **kwargs):
        raise RuntimeError("LPIPS is not available in the render-memory process")


def _without_lpips() -> None:
    import torchmetrics.image.lpip

    torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity = _NoLPIPS


def view_at_size(cameras, view: int, size: int | None = None):
    """Camera ``view`` of ``cameras`` as a one-camera batch; with ``size``, its intrinsics rescaled
    (``Cameras.rescale_output_resolution``) so that it renders ``size`` pixels wide, the aspect kept."""
    camera = cameras[view : view + 1]
    if size is not None:
        if size < 1:
            raise ValueError(f"a render size must be at least 1 pixel, got {size}")
        camera.rescale_output_resolution(size / int(camera.width.flatten()[0]), scale_rounding_mode="round")
    return camera


def build_untrained(config, scene: Path, device: torch.device | str = "cpu", seed: int = 0):
    """The model of the method configuration ``config`` with its initial weights (``seed``), set up on
    ``scene``'s scene box in eval mode, and the scene's test cameras (read by the configuration's own
    dataparser)."""
    import copy

    dataparser = copy.deepcopy(config.pipeline.datamanager.dataparser)
    dataparser.data = Path(scene)
    outputs = dataparser.setup().get_dataparser_outputs("test")
    torch.manual_seed(seed)
    model = config.pipeline.model.setup(scene_box=outputs.scene_box, num_train_data=8, metadata={})
    return model.to(device).eval(), outputs.cameras.to(device)


def prepare_fused_forms(model: torch.nn.Module) -> None:
    """Build every fused inference form (MLPs build theirs on their first eval-mode call) before the
    measurement: merging is done once per model, as loading is, and is not part of rendering a view."""
    for module in model.modules():
        if getattr(module, "runs_fused", False):
            module.fused()
        if hasattr(module, "folded_heads"):  # a field whose heads absorb its trunk's last layer
            module.folded_heads()


def measure_in_this_process(
    config_path: Path,
    view: int = 0,
    *,
    size: int | None = None,
    scene: Path | None = None,
    device: str | None = None,
    breakdown: bool = False,
    chunk: int | None = None,
) -> dict[str, object]:
    """Load the run at ``config_path`` (or, with ``scene``, build the method configuration at ``config_path``
    with its initial weights on ``scene``) and measure the render of test view ``view``, ``size`` pixels wide
    when given, ``chunk`` rays per forward when given (call in a fresh process). With ``breakdown``, the render runs under :class:`LiveTensors`
    instead, and the result holds the peak of its tensors' bytes and the tensors alive then."""
    import gc

    _without_lpips()  # before the run loader imports any model that binds the class
    from eugen_nerf.eval.runs import EvalInputError, final_rgb, load_run, read_config

    if scene is None:
        run = load_run(config_path, chunk, device=device)
        cameras, model, device = (
            run.pipeline.datamanager.eval_dataset.cameras,
            run.pipeline.model,
            run.pipeline.device,
        )
    else:
        if not Path(scene).is_dir():
            raise EvalInputError(f"{scene}: the scene folder does not exist")
        device = resolve_device(device)
        model, cameras = build_untrained(read_config(Path(config_path), check_scene=False), scene, device)
    if not 0 <= view < len(cameras):
        raise EvalInputError(f"{config_path}: test view {view} does not exist ({len(cameras)} test views)")
    camera = view_at_size(cameras, view, size).to(device)
    model = model.eval()
    prepare_fused_forms(model)
    gc.collect()
    on_cuda = device.type == "cuda"
    memory = PeakMemory(device)
    synchronize(device)
    memory.reset()
    if memory.kind == "rss_peak_process_lifetime":
        raise RuntimeError("this kernel cannot reset the resident high-water mark (/proc/self/clear_refs)")
    before = torch.cuda.memory_allocated(device) if on_cuda else _resident_bytes()
    live = LiveTensors() if breakdown else None
    with torch.no_grad(), live if live is not None else contextlib.nullcontext():
        rgb = final_rgb(model.get_outputs_for_camera(camera))
    synchronize(device)
    peak = memory.read()
    if not bool(torch.isfinite(rgb).all()):
        raise EvalInputError(f"{config_path}: the render of test view {view} is not finite")
    kind = "cuda_allocated_delta" if on_cuda else "rss_delta_fresh_process"
    if live is not None:
        return {
            "tensor_peak_bytes": live.peak,
            "at_peak": dict(sorted(live.at_peak.items(), key=lambda item: -item[1])),
            "resolution": list(rgb.shape[:2]),
        }
    return {
        "render_memory_bytes": max(int(peak - before), 0),
        "render_memory_kind": kind,
        "resolution": list(rgb.shape[:2]),
    }


def render_memory(
    config_path: Path,
    view: int = 0,
    timeout: float = 1800,
    *,
    size: int | None = None,
    scene: Path | None = None,
    device: str | None = None,
    chunk: int | None = None,
) -> dict[str, object]:
    """Measure the render memory of the run at ``config_path`` (or, with ``scene``, of the method configuration
    at ``config_path`` with its initial weights) in a fresh Python process (see the module), rendering
    ``chunk`` rays per forward when given (else the run's own)."""
    command = [sys.executable, "-m", "eugen_nerf.eval.memory", str(config_path), "--view", str(view)]
    command += ["--size", str(size)] if size is not None else []
    command += ["--scene", str(scene)] if scene is not None else []
    command += ["--device", device] if device is not None else []
    command += ["--chunk", str(chunk)] if chunk is not None else []
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **_ENV}, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        said = [line for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
        reason = (said or ["no output"])[-1].strip()  # the one-line error or a traceback's last line
        raise RuntimeError(f"render memory of {config_path}: the measuring process failed: {reason}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> None:
    import argparse

    from eugen_nerf.inputs.errors import one_line_errors

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "config",
        type=Path,
        help="a trained run's config.yml, or (with --scene) a method configuration saved as YAML, built with "
        "its initial weights",
    )
    parser.add_argument("--view", type=int, default=0, help="the test view to render (default: 0)")
    parser.add_argument("--size", type=int, default=None, help="render the view this many pixels wide")
    parser.add_argument("--scene", type=Path, default=None, help="build CONFIG untrained on this scene")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--chunk", type=int, default=None, help="rays per forward (default: the run's own)")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="print the tensors alive at the render's peak (exact tensor bytes) instead of the JSON line",
    )
    args = parser.parse_args(argv)
    with one_line_errors("eugen_nerf.eval.memory"):
        result = measure_in_this_process(
            args.config,
            args.view,
            size=args.size,
            scene=args.scene,
            device=args.device,
            breakdown=args.breakdown,
            chunk=args.chunk,
        )
        if not args.breakdown:
            print(json.dumps(result))
            return
        print(f"tensors alive at the render's peak: {result['tensor_peak_bytes'] / 1e6:.1f} MB")
        for what, size in list(result["at_peak"].items())[:20]:
            print(f"{size / 1e6:10.2f} MB  {what}")


if __name__ == "__main__":
    main()
