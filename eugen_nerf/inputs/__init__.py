"""What every command shares to refuse bad input, survive interruptions and stop on numerical faults.

Pure Python, numpy and torch: every package may import it (it imports nothing of ours). One validation
layer per input kind: scenes (:mod:`eugen_nerf.scenes.validate`), run directories (:mod:`eugen_nerf.eval.runs`),
checkpoints (:mod:`eugen_nerf.eval.checkpoints`), images (:mod:`.images`), option values (:mod:`.options`).
"""

from eugen_nerf.inputs.errors import InputError, NumericalError, install_excepthook, one_line_errors, report
from eugen_nerf.inputs.images import read_image, read_image_float
from eugen_nerf.inputs.numerics import check_finite
from eugen_nerf.inputs.options import check_options
from eugen_nerf.inputs.outputs import refuse_existing, staged_directory, swap_into_place

__all__ = [
    "InputError",
    "NumericalError",
    "check_finite",
    "check_options",
    "install_excepthook",
    "one_line_errors",
    "read_image",
    "read_image_float",
    "refuse_existing",
    "report",
    "staged_directory",
    "swap_into_place",
]
