"""Interactive inspection: viewer controls for nerfstudio's own viewer, and the ``eugen-viewer`` comparison."""

from eugen_nerf.viewer.controls import add_eugen_viewer_controls

__all__ = ["add_eugen_viewer_controls"]
