"""Exported fields: the file format, a torch-only reference renderer, and the exporter (``eugen-export``).

``from eugen_nerf.export import load_export, render_view`` needs torch and numpy only (no nerfstudio): render an
exported EUGen field or its dense twin (NeRF or Zip-NeRF) from Python, on any device. The exporter
(:mod:`.exporter`, :mod:`.cli`) reads a trained run and needs the training stack.
"""

from eugen_nerf.export.field import Camera, ExportedField, load_export
from eugen_nerf.export.format import FORMAT_VERSION, ExportFormatError
from eugen_nerf.export.render import Sampling, render_view

__all__ = [
    "FORMAT_VERSION",
    "Camera",
    "ExportFormatError",
    "ExportedField",
    "Sampling",
    "load_export",
    "render_view",
]
