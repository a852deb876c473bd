"""Model size and memory: parameter counts that skip metric modules, and per-run peak memory.

Peak memory is the high-water mark while one run is loaded and rendered: CUDA ``max_memory_allocated``
on GPU; on CPU the process's peak resident set size (``VmHWM``), reset between runs through
``/proc/self/clear_refs`` where the kernel allows it, otherwise the lifetime peak (``ru_maxrss``).
"""

from __future__ import annotations

import re
import resource
from pathlib import Path

import torch
from torch import nn


def count_parameters(model: nn.Module) -> int:
    """Parameters of ``model`` minus those of evaluation-only metric modules (torchmetrics, LPIPS)."""
    from torchmetrics import Metric

    from eugen_nerf.eval.lpips import AlexLPIPS, OfflineLPIPSMetric

    metric_types = (Metric, AlexLPIPS, OfflineLPIPSMetric)
    skipped = {id(p) for m in model.modules() if isinstance(m, metric_types) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skipped)


class PeakMemory:
    """Peak memory on ``device`` between :meth:`reset` and :meth:`read`; :attr:`kind` says what was measured."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.kind = "cuda_max_allocated" if self.device.type == "cuda" else "rss_peak"

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM (Linux >= 4.0)
        except OSError:
            self.kind = "rss_peak_process_lifetime"

    def read(self) -> int:
        """Peak bytes since the last :meth:`reset`."""
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device))
        if self.kind == "rss_peak":
            status = Path("/proc/self/status")
            match = re.search(r"VmHWM:\s+(\d+) kB", status.read_text()) if status.exists() else None
            if match:
                return int(match.group(1)) * 1024
            self.kind = "rss_peak_process_lifetime"
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
