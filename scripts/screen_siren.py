#!/usr/bin/env python
"""Benchmark (not a test): ideas screened for the EUGen SIREN on the cameraman (``--image``: another one).

Each screen changes the shipped siren-init EUGen SIREN at ``m = w`` (``bench_siren``'s ``SIREN_INIT``) in one
way and fits it in that network's setting (256², cosine to 1%, 400 steps, lr 3e-3, one thread) at one seed. So
its PSNR reads against that network's and the tuned dense SIREN's at the same seed
(``benchmarks/siren_256_siren_init*`` and ``siren_256_parity*``). The screens ran at seeds 1 and 2, where the
dense SIREN leads the shipped network (the diagnostic and two wide-variant screens at seed 0 too). None of
these five is an option of the package, because none of them paid:

- ``readout``: the output layer reads M = 4w frozen random sine features of the last ``h`` (the frozen ``G``
  costs no parameters, so the output layer is the one place where more sine features cost only M outputs'
  weights: 384 parameters more);
- ``products``: every frozen-``G`` layer reads ``sin(G₁h) · sin(G₂h)``, the degree-2 products of the spec,
  under the sine (2w cosine units a layer with paired weights; ``A`` starts √2 wider, since a product of two
  sines has half a sine's variance);
- ``products-half-frequency``: the same with both ``G`` scaled by 1/√2 (their sum and difference frequencies
  at SIREN's scale);
- ``norm``: the frozen-``G`` layers get the spec's norm entry, ``x⁺ = [h; ‖h‖]`` (a radial term a dense sine
  unit cannot form; one more frozen column);
- ``gain``: a learned gain per sine unit on the frozen-``G`` layers, ``sin(g ⊙ G(A h + c))`` (256 parameters
  more). At ``m = w`` this network is the dense SIREN with ``W = G A``; Adam steps on the entries of ``A``,
  whose rows are rotated sine units, so the per-unit step size a dense row gets is lost, and the gain gives it
  back.

Eight screens run the wide variant instead (``bench_siren``'s ``SIREN_WIDE``: an ``h = w/2`` state spread
over ``m = 2w`` frozen-``G`` sine units a layer, the dense parameter count spent on sine units), whose input
layer is a dense ``2 → h`` sine layer, so it has w/2 input frequencies where the dense SIREN has w:

- ``wide``: the wide variant unchanged, as ``bench_siren`` runs it, but at a screen's ``--num-features`` and
  ``--lr`` (the astronaut's colour output layer needs ``m = 255`` to stay at the dense count);
- ``input-features``: every layer EUGen, the input layer too, ``A₀ sin(G₀ x⁺) + c₀`` with ``m = 2w`` learned
  frequencies (``G₀`` is ``m × 3``, started as SIREN's first layer times ω₀) and every later ``G`` frozen;
  ``h`` is w/2 - 1 so the count stays under the dense one, and ``A``'s rate is halved (each next
  pre-activation sums 2w sine units);
- ``input-features-full-rate``: the same at ``A``'s full rate;
- ``wide-a-rate-0.7``: the wide variant itself with ``A``'s rate at 0.7 (≈ 1/√2), between the full rate (which
  stalls at seed 1 and is best at seed 0) and the half rate (``bench_siren``'s ``SIREN_WIDE_SCALED``: no
  stall, 3 dB behind on the mean);
- ``wide-sine-basis``: the wide variant with each ``A`` and ``c`` that a frozen ``G`` reads held, for
  training, as ``V = G A / ω`` (:class:`SineBasisWeights`), so that Adam steps on one entry per pair of sine
  units, as on a dense SIREN's ``W``, and not in the rotated basis of ``h`` (what ``dense-start`` below
  measures at ``m = w``); ``G A`` moves by the projection of each step onto ``G``'s columns, and what is
  stored is ``A``. It became the package's ``eugen-fit-image --sine-basis``, which this screen calls;
- ``wide-sine-basis-0.5``: the same with the steps on ``V`` halved;
- ``input-features-sine-basis``: ``input-features`` with every ``A`` a frozen ``G`` reads (the input layer's
  too) in the sine basis, at the full rate (the basis took the wide variant's stall away);
- ``mid-sine-basis``: between the shipped network and the wide one, ``h = 96`` and ``m = 170`` (the most
  sine units under the dense count at that ``h``, on a colour image too), in the sine basis.

Two screens are a diagnostic, not an idea. ``dense-start`` sets every weight of the shipped network so that it
computes the tuned dense SIREN of the same seed exactly (``A = ω₀ G⁻¹ W`` through each frozen ``G``, the
learned ``G`` as ``ω₀ [W b]``). Both networks then start as one function and take steps of the same size; what
differs is only the basis in which Adam steps on ``A``: the frozen ``G`` rotates it away from the sine units.
With ``G`` a signed permutation (no rotation) Adam on ``A`` is Adam on the dense ``W``; the one other
difference is Adam's ε, which weighs 30 times more on the learned ``G = ω₀ [W b]`` (its gradients are 1/ω₀ of
``W``'s). Without ε the two fits coincide (``tests/test_screen_siren.py``). ``dense-start-unrotated`` is that
network, so of the gap between ``dense-start`` and the dense run of the same seed, what
``dense-start-unrotated`` does not share is what the rotation costs.

Every screen's network is evaluated unfused (the wrappers here have no merged form).

    .venv/bin/eugen-bench siren-256-screens-seed1   # = scripts/screen_siren.py --seed 1 (all screens)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import tyro
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_siren import (  # the networks screened
    SIREN_INIT,
    SIREN_WIDE,
    BenchSiren,
    Variant,
    seeded_network,
    variants,
)

from eugen_nerf.eval.size import count_parameters
from eugen_nerf.fields.siren import SirenEUGenSpec, siren_eugen_init_, siren_start_
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenLinear, EUGenMLP
from eugen_nerf.siren.fit_image import fit, save_png
from eugen_nerf.siren.image import load_image
from eugen_nerf.siren.sine_basis import SineBasisWeights, hold_in_sine_basis

LR_SCHEDULE = "cosine"
"""Every screen's schedule: the rate falls along a cosine to 1%."""
TUNED_DENSE = "dense lr3e-3"
"""The tuned dense SIREN in this setting (``bench_siren``'s best rate at 256², cosine, 400 steps)."""
OMEGA = 30.0
"""ω = ω₀ of the shipped siren-init network (its frozen ``G`` is about ω times an orthogonal matrix)."""


class ProductSine(nn.Module):
    """``A (sin(G₁h) ⊙ sin(G₂h)) + c``: the layer's own frozen ``G₁`` and a second frozen ``G₂``, seeded apart."""

    def __init__(self, layer: EUGenLinear, spec: SirenEUGenSpec, frequency: float) -> None:
        super().__init__()
        self.layer = layer
        other = EUGenMLP.make_layer("eugen", layer.in_features, layer.out_features, spec)
        other.constant_projection = False
        other.regenerate_projections()
        self.register_buffer("second", other.projections.detach().clone() * frequency)
        with torch.no_grad():
            layer.projections.mul_(frequency)
            layer.weight.mul_(math.sqrt(2.0))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        d = self.layer.in_features
        first = self.layer.projections_of(h)
        second = torch.addmm(self.second[:, d], h, self.second[:, :d].T)
        return nn.functional.linear(torch.sin(first) * torch.sin(second), self.layer.weight, self.layer.bias)


class GainedSine(nn.Module):
    """``A sin(g ⊙ G h) + c`` with a learned gain ``g`` per sine unit, started at 1."""

    def __init__(self, layer: EUGenLinear) -> None:
        super().__init__()
        self.layer = layer
        self.gain = nn.Parameter(torch.ones(layer.num_features))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        feats = torch.sin(self.layer.projections_of(h) * self.gain)
        return nn.functional.linear(feats, self.layer.weight, self.layer.bias)


def stored_parameters(model: EUGenMLP) -> int:
    """What the network stores: its parameters, with :class:`SineBasisWeights` counted as ``A`` and ``c``."""
    extra = sum(m.training_only for m in model.modules() if isinstance(m, SineBasisWeights))
    return count_parameters(model) - extra


def sine_basis(rate: float) -> Callable[[EUGenMLP, SirenEUGenSpec], None]:
    """Every EUGen layer whose output a frozen ``G`` reads gets its ``A`` and ``c`` in that ``G``'s sine basis,
    Adam's step on them times ``rate`` (the package's ``eugen-fit-image --sine-basis``)."""

    def change(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
        hold_in_sine_basis(model, OMEGA, rate)

    return change


def frozen_layers(model: EUGenMLP) -> list[int]:
    """Indices of the layers with a frozen ``G``: every EUGen layer after the first (whose ``G`` is learned)."""
    return [
        i
        for i, layer in enumerate(model.layers)
        if isinstance(layer, EUGenLinear) and not layer.trainable_projections
    ]


def siren_layer(model: EUGenMLP, index: int, spec: SirenEUGenSpec) -> EUGenLinear:
    """A frozen-``G`` EUGen sine layer for position ``index``, started as the shipped network starts its own."""
    layer = EUGenMLP.make_layer("eugen", *model.layer_dims(index), spec)
    siren_start_(layer, OMEGA, output=index == len(model.layers) - 1)
    return layer


def readout(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    last = len(model.layers) - 1
    model.layers[last] = siren_layer(
        model, last, replace(spec.offset_seed(last), num_features=4 * spec.num_features)
    )


def products(frequency: float) -> Callable[[EUGenMLP, SirenEUGenSpec], None]:
    def change(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
        for i in frozen_layers(model):
            model.layers[i] = ProductSine(model.layers[i], spec.offset_seed(i + 500), frequency)

    return change


def norm_entry(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    for i in frozen_layers(model):
        model.layers[i] = siren_layer(model, i, replace(spec.offset_seed(i), use_norm=True, init="eugen"))


def gain(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    for i in frozen_layers(model):
        model.layers[i] = GainedSine(model.layers[i])


def input_features(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    """Layer 0 becomes an EUGen layer over the coordinates with learned ``G₀`` (SIREN's first layer ``W ~
    U(±1/d)``, ``b ~ U(±1/√d)``, times ω₀), layer 1's learned ``G`` a frozen one."""
    d = model.in_dim
    learned = replace(spec.offset_seed(0), trainable_projections=True, init="eugen")
    first = EUGenMLP.make_layer("eugen", d, model.layer_width, learned)
    siren_eugen_init_(first, OMEGA, output=False)
    with torch.no_grad():
        first.projections.zero_()
        first.projections[:, :d].uniform_(-OMEGA / d, OMEGA / d)
        first.projections[:, d].uniform_(-OMEGA / math.sqrt(d), OMEGA / math.sqrt(d))
    model.layers[0] = first
    model.layers[1] = siren_layer(model, 1, spec.offset_seed(1))


def input_features_in_sine_basis(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    """``input-features`` with every ``A`` a frozen ``G`` reads (the input layer's too) in the sine basis."""
    input_features(model, spec)
    sine_basis(1.0)(model, spec)


def copy_dense_start(model: EUGenMLP, dense: EUGenMLP) -> None:
    """Set the shipped network ``model`` to compute the dense SIREN ``dense`` (same width and depth) exactly.

    ``model``'s layers are the dense input layer and the EUGen layers 1..L (the first with a learned ``G``, the
    last a readout); ``dense``'s are the input layer, L hidden sine layers and the output layer."""
    omega = dense.activation.omega_0
    first, *eugen = model.layers
    with torch.no_grad():
        first.weight.copy_(dense.layers[0].weight)
        first.bias.copy_(dense.layers[0].bias)
        hidden = dense.layers[1]  # sin(G [h; 1]) = sin(ω₀ (W h + b))
        eugen[0].projections.copy_(omega * torch.cat([hidden.weight, hidden.bias[:, None]], dim=1))
        for layer, after, target in zip(eugen, [*eugen[1:], None], dense.layers[2:]):
            if after is None:  # the readout: the output layer itself
                layer.weight.copy_(target.weight)
                layer.bias.copy_(target.bias)
                continue
            # the next sine reads G (A h + c) + G's constant column, the dense one ω₀ (W h + b)
            g = after.projections.double()
            square, constant = g[:, : after.in_features], g[:, after.in_features]
            layer.weight.copy_(torch.linalg.solve(square, omega * target.weight.double()))
            layer.bias.copy_(torch.linalg.solve(square, omega * target.bias.double() - constant))


def unchanged(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    """The network as its base builds it (a screen that changes only the start, the width or a rate)."""


def unrotated(model: EUGenMLP, spec: SirenEUGenSpec) -> None:
    """Each frozen ``G`` becomes ω₀ times a random signed permutation: still orthogonal at the shipped scale,
    but it turns no coordinate into a mix of sine units (``G`` drawn from each layer's own seed)."""
    for i in frozen_layers(model):
        g = model.layers[i].projections
        n = g.shape[0]
        generator = torch.Generator().manual_seed(model.layers[i].seed)
        signs = torch.randint(0, 2, (n,), generator=generator) * 2.0 - 1.0
        with torch.no_grad():
            g.zero_()
            g[torch.arange(n), torch.randperm(n, generator=generator)] = OMEGA * signs


@dataclass(frozen=True)
class Screen:
    """One change to a network of ``bench_siren``, with the width, ``A``'s rate factor and start it runs at."""

    change: Callable[[EUGenMLP, SirenEUGenSpec], None]
    base: str = SIREN_INIT
    """the ``bench_siren`` variant changed."""
    width: int | None = None
    """hidden width (``h``); ``None``: the base's."""
    num_features: int | None = None
    """sine units a layer (``m``); ``None``: the base's."""
    weight_lr_scale: float | None = None
    """``A``'s learning-rate factor; ``None``: the base's."""
    dense_start: bool = False
    """start as the tuned dense SIREN of the same seed computes (:func:`copy_dense_start`)."""


SCREENS: dict[str, Screen] = {
    "readout": Screen(readout),
    "products": Screen(products(1.0)),
    "products-half-frequency": Screen(products(1.0 / math.sqrt(2.0))),
    "norm": Screen(norm_entry),
    "gain": Screen(gain),
    "input-features": Screen(input_features, SIREN_WIDE, width=63, weight_lr_scale=0.5),
    "input-features-full-rate": Screen(input_features, SIREN_WIDE, width=63),
    "dense-start": Screen(unchanged, dense_start=True),
    "dense-start-unrotated": Screen(unrotated, dense_start=True),
    "wide": Screen(unchanged, SIREN_WIDE),
    "wide-a-rate-0.7": Screen(unchanged, SIREN_WIDE, weight_lr_scale=0.7),
    "wide-sine-basis": Screen(sine_basis(1.0), SIREN_WIDE),
    "wide-sine-basis-0.5": Screen(sine_basis(0.5), SIREN_WIDE),
    "input-features-sine-basis": Screen(input_features_in_sine_basis, SIREN_WIDE, width=63),
    "mid-sine-basis": Screen(sine_basis(1.0), SIREN_WIDE, width=96, num_features=170),
}


@dataclass
class ScreenSiren:
    output: Path = Path("benchmarks/siren_256_screens")
    """folder that receives screens.json and, in pictures/, each screen's fit."""
    seed: int = 1
    """seeds the initialisation and the EUGen projections, as bench_siren's --seed."""
    screens: tuple[str, ...] = tuple(SCREENS)
    """screens to run (default: all)."""
    image: str = "camera"
    """a skimage.data image by name (camera, astronaut, ...), as bench_siren's --image."""
    size: int = 256
    """the image is resized to size x size pixels."""
    num_features: int | None = None
    """the EUGen layers' m (default: each screened network's own); a colour image's wider output layer may
    need one fewer to stay at the dense parameter count (255 for the wide variant's 256)."""
    steps: int = 400
    """Adam steps (full-image batches), the rate falling along a cosine to 1%."""
    lr: float | None = None
    """Adam's learning rate (default: each screened network's own, 3e-3); the dense SIREN's best differs by
    image (1e-3 on the astronaut)."""
    log_every: int = 40
    """steps between two logged PSNRs."""


def screened_network(
    name: str | None, seed: int, channels: int, num_features: int | None = None
) -> tuple[EUGenMLP, SirenEUGenSpec, float]:
    """The network screen ``name`` changes (``None``: the shipped one, unchanged) as ``bench_siren --seed seed``
    starts it, changed by the screen, with its spec and learning rate; ``num_features`` replaces the base's
    ``m``."""
    screen = SCREENS[name] if name is not None else Screen(unchanged)
    base, config = bench_variant(screen.base, seed)
    if screen.width is not None:
        base = replace(base, width=screen.width)
    num_features = num_features if num_features is not None else screen.num_features
    if num_features is not None:
        base = replace(base, eugen=replace(base.eugen, num_features=num_features))
    model, spec = seeded_network(base, seed, channels, config.hidden_layers)  # the base run's start
    if screen.weight_lr_scale is not None:
        spec = replace(spec, weight_lr_scale=screen.weight_lr_scale)
    if name is not None:
        # EUGenMLP puts no sine after an EUGen layer or a wrapper of one (``.layer``), read from the layers
        # as the screen leaves them; the wrappers have no merged form
        screen.change(model, spec)
        model.fuse_in_eval = False
    if screen.dense_start:
        copy_dense_start(model, tuned_dense(seed, channels))
    return model, spec, base.lr


def tuned_dense(seed: int, channels: int) -> EUGenMLP:
    """The tuned dense SIREN as ``bench_siren --seed seed`` starts it (what ``dense-start`` computes)."""
    variant, config = bench_variant(TUNED_DENSE, seed)
    return seeded_network(variant, seed, channels, config.hidden_layers)[0]


def bench_variant(name: str, seed: int) -> tuple[Variant, BenchSiren]:
    """``bench_siren``'s variant ``name`` and its config, as ``bench_siren --seed seed`` builds them."""
    config = BenchSiren(seed=seed)
    return next(v for v in variants(config) if v.name == name), config


def bench_setting() -> dict:
    """What ``screens.json`` leaves out of ``bench_siren``'s setting, fixed for every screen (the sizes of
    ``bench_siren``'s defaults, from which each screened network is built, and the schedule)."""
    defaults = BenchSiren()
    return {"width": defaults.width, "hidden_layers": defaults.hidden_layers, "lr_schedule": LR_SCHEDULE}


def run_screen(name: str, config: ScreenSiren, target: torch.Tensor) -> dict:
    model, spec, lr = screened_network(name, config.seed, target.shape[-1], config.num_features)
    lr = config.lr if config.lr is not None else lr
    result = fit(
        model, target, config.steps, lr, config.log_every, spec, progress=False, lr_schedule=LR_SCHEDULE
    )
    if not math.isfinite(result.final_psnr):
        raise SystemExit(f"screen {name}: the fit's PSNR is {result.final_psnr}")
    (config.output / "pictures").mkdir(parents=True, exist_ok=True)
    save_png(config.output / "pictures" / f"{name}.png", result.reconstruction)
    return {
        "parameters": stored_parameters(model),
        "history": result.history,
        "final_psnr": result.final_psnr,
        "lr": lr,
        "network": SCREENS[name].base,
        "width": model.layer_width,
        "weight_lr_scale": spec.weight_lr_scale,
    }


def main(config: ScreenSiren) -> None:
    unknown = sorted(set(config.screens) - set(SCREENS))
    if unknown:
        usage_error(
            "screen_siren", f"unknown screen(s) {', '.join(unknown)}; choose from {', '.join(SCREENS)}"
        )
    if config.lr is not None and not config.lr > 0:
        usage_error("screen_siren", f"--lr must be positive, got {config.lr}")
    torch.set_num_threads(1)
    target = torch.from_numpy(load_image(config.image, config.size))
    path = config.output / "screens.json"
    setting = {
        "image": config.image,
        "size": config.size,
        "steps": config.steps,
        "seed": config.seed,
        "num_features": config.num_features,
        "lr": config.lr,  # None: each screen's own (files from before the option have no entry, and match)
        "base": SIREN_INIT,  # the shipped network the screens read against; each screen names the one it changes
    }
    earlier = json.loads(path.read_text()) if path.exists() else {}
    # screens run before in the same setting are kept (a run of one screen adds to the others); any other
    # setting's are replaced, so one file never mixes seeds or sizes
    results = earlier.get("screens", {}) if {k: earlier.get(k) for k in setting} == setting else {}
    for name in config.screens:
        results[name] = run_screen(name, config, target)
        print(
            f"{name}: {results[name]['final_psnr']:.2f} dB ({results[name]['parameters']:,} parameters)",
            flush=True,
        )
        path.parent.mkdir(parents=True, exist_ok=True)  # written after every screen: nothing lost
        path.write_text(json.dumps({**setting, "screens": results}, indent=1))


if __name__ == "__main__":
    main(tyro.cli(ScreenSiren, description=__doc__.split("\n\n")[0]))
