"""nerfstudio method specifications (entry points ``nerfstudio.method_configs``).

nerfstudio imports every entry-point module before it builds any model or loads any checkpoint, also for
stock methods, so importing this package must change nothing it was not asked to change:

- LPIPS without a download: torchmetrics' LPIPS is replaced by the offline one only when its converted
  weights are present (``eugen-eval setup-lpips``); otherwise torchmetrics is untouched.
- nerfstudio 1.1.5 checkpoints (which hold numpy scalars) loadable under torch's ``weights_only``: numpy
  scalar/array/dtype types are allow-listed for ``torch.load`` (a load that would otherwise fail).
- Our own error kinds only: an uncaught :class:`~eugen_nerf.inputs.errors.InputError` or
  :class:`~eugen_nerf.inputs.errors.NumericalError` (bad input, a non-finite loss) prints one line instead
  of a traceback; every other exception reaches the previous ``sys.excepthook`` unchanged.
- No warnings filter: our datamanagers and models silence nerfstudio's per-bundle indexing warning only
  around their own ray generation (:mod:`eugen_nerf.scenes.quiet`).
"""

from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints
from eugen_nerf.eval.lpips import install_offline_lpips
from eugen_nerf.inputs.errors import install_excepthook

install_offline_lpips()
allow_numpy_checkpoints()
install_excepthook()  # our InputError/NumericalError in ns-* commands: one line, no traceback
