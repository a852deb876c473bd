"""nerfstudio method specifications (entry points ``nerfstudio.method_configs``).

nerfstudio imports an entry-point module before it builds any model or loads any checkpoint, so this is
where the process is made to work offline and on torch >= 2.6: LPIPS without a download (for stock models
too), and nerfstudio 1.1.5 checkpoints (which hold numpy scalars) loadable under ``weights_only``.
"""

import warnings

from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints
from eugen_nerf.eval.lpips import install_offline_lpips
from eugen_nerf.inputs.errors import install_excepthook

install_offline_lpips()
allow_numpy_checkpoints()
install_excepthook()  # bad input and non-finite values in ns-* commands: one line, no traceback

# nerfstudio 1.1.5 indexes camera tensors with lists, which torch >= 2.9 reports once per ray bundle:
# benign here, and it drowns every command's output.
warnings.filterwarnings("ignore", message="Using a non-tuple sequence for multidimensional indexing")
