"""An exported field as torch tensors, and its evaluation: the format's semantics, with torch alone.

:func:`load_export` reads an export (:mod:`.format`) onto any device; :class:`ExportedField` holds its fields
(NeRF: ``coarse`` and ``fine``), occupancy grid, bounds, near/far, background and test cameras. The Zip-NeRF
head (``zipnerf``) holds the NeRF field (``nerf``: hash grid, density MLP with its bottleneck, view MLP) and its
proposal networks (``proposal_0``, ...: hash grid, density MLP), each hash grid a table read at Zip-NeRF's
multisampled, blurred frustums (:class:`HashGrid`). An exported
MLP is a list of merged steps (the fused form of :mod:`eugen_nerf.layers.fused`, written as arrays): a dense
step computes ``act(W x + b)``; an EUGen step projects (``W x + b``, the rows after the projections being
the factor whose norm is ``‖h‖``), scales, multiplies the orders' blocks and applies its feature map, so the
next step reads the features and the wide hidden activation of a merged chain is never built.
:func:`run_mlp` evaluates one; the web page's shader computes the same steps.

Imports torch and numpy only: usable where nerfstudio is not installed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from eugen_nerf.export import format as fmt
from eugen_nerf.fields.multisample import contract_gaussians, encode_directions, level_weights
from eugen_nerf.layers.eugen import FEATURE_MAPS_IN_PLACE, TINY_SQUARE, scales_higher_orders, softplus_
from eugen_nerf.layers.fused import default_rows_per_pass, run_in_passes

ACTIVATIONS = {
    None: lambda x: x,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "softplus": torch.nn.functional.softplus,
}
FEATURE_MAPS = {
    "identity": lambda x: x,
    "relu": torch.relu,
    "softplus": torch.nn.functional.softplus,
    "sin": torch.sin,
}
HEADS = ("nerf", "zipnerf")
"""Field heads an export may hold."""
LAST_SAMPLE = "last_sample"
"""The background that is each ray's last sample's colour (the scene's ``background`` in the file)."""


@dataclass
class Step:
    """One merged layer (see the module docstring); ``kind`` is ``dense`` or ``eugen``."""

    kind: str
    weight: Tensor
    bias: Tensor
    skip_weight: Tensor | None = None
    activation: str | None = None
    num_features: int = 0
    degree: int = 1
    feature_map: str = "identity"
    scaling: str = "polynomial"
    use_norm: bool = False
    augmented_dim: int = 0
    norm_rows: int = 0
    norm_constant: float | None = None
    norm_projection: Tensor | None = None
    out_weight: Tensor | None = None
    out_bias: Tensor | None = None

    @property
    def needs_input_norm(self) -> bool:
        return self.use_norm or self.scaling in ("unit", "linear")


@dataclass
class MLP:
    in_dim: int
    steps: list[Step]
    out_activation: str | None = None

    def __call__(self, inputs: Tensor | tuple[Tensor, ...]) -> Tensor:
        """:func:`run_mlp`, in passes of rows on a CPU without autograd as the fused form runs
        (:func:`~eugen_nerf.layers.fused.run_in_passes`)."""
        parts = list(inputs) if isinstance(inputs, tuple) else [inputs]
        return run_in_passes(lambda rows: run_mlp(self, tuple(rows)), parts, default_rows_per_pass(parts[0]))

    def macs_per_point(self) -> int:
        total = 0
        for step in self.steps:
            total += step.weight.numel() + (step.skip_weight.numel() if step.skip_weight is not None else 0)
            if step.out_weight is not None:
                total += step.out_weight.numel()
        return total


def _add_product(z: Tensor, x: Tensor, weight: Tensor) -> None:
    """``z += x @ weight.T`` in place (cast to ``z``'s type: autocast does not cast in-place products)."""
    z.addmm_(x.to(z.dtype), weight.T.to(z.dtype))


def _first_product(step: Step, parts: tuple[Tensor, ...]) -> Tensor:
    """``W [parts] + b`` of the first step, one product per part: the parts are never concatenated."""
    z = torch.addmm(step.bias, parts[0], step.weight[:, : parts[0].shape[1]].T)
    column = parts[0].shape[1]
    for part in parts[1:]:
        _add_product(z, part, step.weight[:, column : column + part.shape[1]])
        column += part.shape[1]
    return z


def run_mlp(mlp: MLP, inputs: Tensor | tuple[Tensor, ...]) -> Tensor:
    """The exported MLP at ``inputs`` ``(N, in_dim)``, or at the concatenation of a tuple of ``(N, d_i)`` parts
    (read by the first step part by part, without building the concatenation).

    Each step works in place on the product it has just allocated (skip products, activations, norms,
    orders, feature maps), so a step holds no more than its input and its output at once: the peak memory of
    a render is set by the widest ``input + output`` pair of steps, for dense and EUGen steps alike."""
    parts = inputs if isinstance(inputs, tuple) else (inputs,)
    if len(parts) > 1 and any(step.skip_weight is not None for step in mlp.steps):
        parts = (torch.cat(parts, dim=-1),)  # a skip reads the whole input again
    inputs = parts[0]
    x: Tensor | tuple[Tensor, ...] = parts
    input_sq_norm = None
    for step in mlp.steps:
        if isinstance(x, tuple):
            z = _first_product(step, x)
        else:
            z = torch.addmm(step.bias, x, step.weight.T)
        if step.skip_weight is not None:
            rows = z.shape[1] - step.norm_rows
            _add_product(z[:, :rows], inputs, step.skip_weight)
        if step.kind == "dense":
            x = _IN_PLACE.get(step.activation, ACTIVATIONS[step.activation])(z)
            continue
        projected, rms = z, None
        if step.needs_input_norm:
            if step.norm_rows:
                projected = z[:, : -step.norm_rows]
                norm = torch.linalg.vector_norm(z[:, -step.norm_rows :], dim=1, keepdim=True)
                if step.norm_constant is not None:
                    norm = torch.hypot(norm, norm.new_tensor(step.norm_constant))
            else:
                norm = sum(
                    torch.linalg.vector_norm(part, dim=1, keepdim=True).square()
                    for part in (x if isinstance(x, tuple) else (x,))
                ).sqrt()
            if step.skip_weight is not None:
                if input_sq_norm is None:
                    input_sq_norm = torch.linalg.vector_norm(inputs, dim=1, keepdim=True).square()
                norm = (norm.square() + input_sq_norm).sqrt()
            # The (N, 1) norms are computed in float32 (autocast runs norms in float32); they are cast to the
            # projections' dtype before touching the (N, rows) tensors, which would otherwise be promoted to
            # float32 under bf16/fp16 autocast, every element-wise pass then moving twice the bytes.
            dtype = projected.dtype
            if step.use_norm:
                projected.addcmul_(norm.to(dtype), step.norm_projection.to(dtype))
            if step.scaling in ("unit", "linear"):
                rms = ((norm.float().square() * (1 + int(step.use_norm)) + 1.0) / step.augmented_dim).sqrt()
                rms = rms.to(dtype)
        if step.scaling == "projected":  # rms(x⁺) estimated by the projections' own rms
            square = torch.linalg.vector_norm(projected, dim=1, keepdim=True, dtype=torch.float32).square()
            rms = (square / projected.shape[1] + TINY_SQUARE).sqrt().to(projected.dtype)
        # Φ(a·z) = a·Φ(z) for a homogeneous map: a degree-1 scaling then divides the higher orders alone
        # (Φ(∏ p_j / rms)·rms = Φ(p_1 ∏_{j>1} p_j / rms)), and the features are never rescaled as a whole.
        rescaled = step.scaling in ("linear", "projected")
        higher_only = scales_higher_orders(step.scaling, step.feature_map)  # exports share projections
        if rms is not None and not higher_only:
            projected.div_(rms)
        m, k = step.num_features, step.degree
        # Running products of the k orders, each block multiplied in place by the one before it.
        for order in range(1, k):
            block = projected[:, order * m : (order + 1) * m].mul_(projected[:, (order - 1) * m : order * m])
            if higher_only:
                block.div_(rms)
        features = FEATURE_MAPS_IN_PLACE.get(step.feature_map, FEATURE_MAPS[step.feature_map])(projected)
        if rescaled and not higher_only:
            features.mul_(rms)
        x = features
        del z, projected, features  # x alone keeps the features alive (the step's input is already free)
        if step.out_weight is not None:
            x = torch.addmm(step.out_bias, x, step.out_weight.T)
    if x is inputs:
        return ACTIVATIONS[mlp.out_activation](x)
    return _IN_PLACE.get(mlp.out_activation, ACTIVATIONS[mlp.out_activation])(x)


_IN_PLACE = {"relu": torch.relu_, "sigmoid": torch.sigmoid_, "softplus": softplus_}


@dataclass
class Encoding:
    """NeRF's positional encoding: ``[sin(s f_j x), sin(s f_j x + π/2), x]`` (channel-major, as nerfstudio's)."""

    frequencies: Tensor
    scale: float
    include_input: bool

    def __call__(self, x: Tensor) -> Tensor:
        scaled = (self.scale * x)[..., None] * self.frequencies
        scaled = scaled.reshape(*scaled.shape[:-2], -1)
        encoded = torch.sin(torch.cat([scaled, scaled + torch.pi / 2.0], dim=-1))
        return torch.cat([encoded, x], dim=-1) if self.include_input else encoded


@dataclass
class NeRFField:
    """Positions -> encoding -> trunk -> softplus density; [direction encoding, trunk features] -> colour."""

    position_encoding: Encoding
    direction_encoding: Encoding
    trunk: MLP
    density: MLP
    color: MLP

    def density_and_features(self, positions: Tensor, blur: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Density ``(N, 1)`` and the trunk's features at ``positions`` ``(N, 3)`` (``blur`` is unused: NeRF reads
        points)."""
        features = self.trunk(self.position_encoding(positions))
        return self.density(features), features

    def color_of(self, directions: Tensor, features: Tensor) -> Tensor:
        return self.color((self.direction_encoding(directions), features))

    def __call__(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``(N, 1)`` and colour ``(N, 3)`` at ``positions`` seen along ``directions``."""
        density, features = self.density_and_features(positions)
        return density, self.color_of(directions, features)

    def macs_per_point(self) -> int:
        return self.trunk.macs_per_point() + self.density.macs_per_point() + self.color.macs_per_point()


HASH_PRIMES = (1, 2654435761, 805459861)
"""The spatial hash of a grid corner ``(x, y, z)``: ``(x * p0) ^ (y * p1) ^ (z * p2)``, its low bits (the table
size is a power of two) (Instant-NGP's, as nerfstudio's torch ``HashEncoding`` computes it)."""


@dataclass
class HashGrid:
    """A multiresolution hash grid: level ``l`` has ``resolutions[l]`` cells per axis over the unit cube, and
    its corners' features are rows ``l * table_size + hash(corner) & (table_size - 1)`` of ``table``, blended
    trilinearly."""

    table: Tensor
    """``(levels * table_size, features_per_level)``."""
    resolutions: Tensor
    """``(levels,)`` float."""
    table_size: int

    @property
    def num_levels(self) -> int:
        return self.resolutions.shape[0]

    def __call__(self, unit: Tensor, chunk: int | None = None) -> Tensor:
        """Features ``(N, levels, features_per_level)`` at ``unit`` ``(N, 3)`` in ``[0, 1]^3``, ``chunk`` points
        at a time (None: 16,384 on the CPU, whose caches favour small chunks; 2^20 elsewhere, where each chunk's
        few dozen kernel launches must stay few against the points they cover)."""
        if chunk is None:
            chunk = 16384 if unit.device.type == "cpu" else 1 << 20
        out = self.table.new_zeros(unit.shape[0], self.num_levels, self.table.shape[1])
        offsets = torch.arange(self.num_levels, device=unit.device) * self.table_size
        for start in range(0, unit.shape[0], chunk):
            self._lookup(unit[start : start + chunk], offsets, out[start : start + chunk])
        return out

    def _lookup(self, unit: Tensor, offsets: Tensor, out: Tensor) -> None:
        """Adds the trilinear blend of the eight corners' features into ``out``; each axis's two hashed
        coordinates and two weights are computed once and combined per corner."""
        scaled = unit[:, None, :] * self.resolutions[None, :, None]  # (N, L, 3)
        low = torch.floor(scaled)
        frac = scaled.sub_(low)
        low = low.long()
        # per axis, (hash of the lower corner, of the upper corner) and (their weights)
        hashes = [(low[..., a] * p, (low[..., a] + 1) * p) for a, p in enumerate(HASH_PRIMES)]
        weights = [(1 - frac[..., a], frac[..., a]) for a in range(3)]
        mask = self.table_size - 1
        for corner in range(8):
            x, y, z = (corner >> 0) & 1, (corner >> 1) & 1, (corner >> 2) & 1
            index = (hashes[0][x] ^ hashes[1][y] ^ hashes[2][z]).bitwise_and_(mask).add_(offsets)
            weight = weights[0][x] * weights[1][y] * weights[2][z]
            out.addcmul_(weight[..., None], self.table[index])


@dataclass
class ZipNeRFDensity:
    """Zip-NeRF's density network (a proposal network, and the NeRF field's first half): the hash grid at each
    multisample over ``bounds`` (the unit cube's box), features down-weighted per level by the blur and averaged
    over the multisamples, the density MLP, ``softplus(h[0] + density_bias)`` (0 unless every multisample lies
    inside the box). With ``contraction`` (unbounded scenes) the multisamples and their blur are first contracted
    into the ball of radius 2 (mip-NeRF 360's, :func:`~eugen_nerf.fields.multisample.contract_gaussians`) and
    ``bounds`` is that ball's box, ``[-2, 2]^3``."""

    grid: HashGrid
    density: MLP
    bounds: Tensor
    density_bias: float
    contraction: bool = False

    def density_and_features(self, means: Tensor, blur: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Density ``(N, 1)`` and the density MLP's output ``(N, width)`` of ``N`` frustums, each given by its
        multisamples ``means`` ``(N, K, 3)`` (or one point, ``(N, 3)``) and their blur ``(N, K)`` (or ``(N,)``;
        standard deviations in the scene's units; None: no blur)."""
        if means.dim() == 2:
            means = means[:, None]
            blur = None if blur is None else blur[:, None]
        if self.contraction:
            means, blur = contract_gaussians(
                means, means.new_zeros(means.shape[:-1]) if blur is None else blur
            )
        low, high = self.bounds[0], self.bounds[1]
        extent = high - low
        unit = (means - low) / extent
        inside = ((unit > 0) & (unit < 1)).all(-1).all(-1, keepdim=True)
        n, k = means.shape[:2]
        features = self.grid(unit.clamp(0.0, 1.0).reshape(-1, 3)).view(n, k, self.grid.num_levels, -1)
        if blur is not None:
            stds = blur / extent.prod() ** (1 / 3)
            features = features * level_weights(2 * stds, self.grid.resolutions)[..., None]
        h = self.density(features.mean(1).flatten(1))
        return torch.nn.functional.softplus(h[:, :1] + self.density_bias) * inside, h

    def macs_per_point(self) -> int:
        return self.density.macs_per_point()


@dataclass
class ZipNeRFField(ZipNeRFDensity):
    """:class:`ZipNeRFDensity` with a bottleneck, then ``view([h, encode_directions(d)])``, sigmoid, padded by
    ``rgb_padding`` on both sides."""

    view: MLP = None  # type: ignore[assignment]
    direction_frequencies: int = 4
    rgb_padding: float = 0.0

    def color_of(self, directions: Tensor, features: Tensor) -> Tensor:
        rgb = self.view((features, encode_directions(directions, self.direction_frequencies)))
        return rgb * (1 + 2 * self.rgb_padding) - self.rgb_padding

    def macs_per_point(self) -> int:
        return self.density.macs_per_point() + self.view.macs_per_point()


NO_DISTORTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass
class Camera:
    """A perspective camera (nerfstudio's convention: x right, y up, looking down -z) in the field's frame, with
    nerfstudio's OpenCV lens distortion ``[k1, k2, k3, k4, p1, p2]`` (in normalised image coordinates, so a
    resized camera keeps it; all zero: a pinhole)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    camera_to_world: Tensor
    name: str = ""
    distortion: tuple[float, ...] = NO_DISTORTION

    def resized(self, width: int, height: int) -> Camera:
        """The same view at another resolution (intrinsics scaled per axis)."""
        sx, sy = width / self.width, height / self.height
        return dataclasses.replace(
            self,
            width=width,
            height=height,
            fx=self.fx * sx,
            fy=self.fy * sy,
            cx=self.cx * sx,
            cy=self.cy * sy,
        )


@dataclass
class ExportedField:
    """A loaded export: what :func:`eugen_nerf.export.render.render_view` renders."""

    header: dict
    fields: dict[str, NeRFField | ZipNeRFDensity]
    occupancy: Tensor
    """``(R, R, R)`` bool, indexed ``[x, y, z]`` over :attr:`bounds`."""
    bounds: Tensor
    """``(2, 3)``: the box of the occupancy grid (nothing is rendered outside it by the page's sampling)."""
    near: float
    far: float
    background: Tensor | None
    """RGB, or None: each ray's last sample's colour (``"last_sample"`` in the file, nerfstudio's background of
    unbounded scenes)."""
    cameras: list[Camera] = field(default_factory=list)
    path: Path | None = None

    @property
    def head(self) -> str:
        return self.header["head"]

    @property
    def device(self) -> torch.device:
        return self.bounds.device

    @property
    def contraction(self) -> bool:
        """Whether the scene is unbounded, its fields reading contracted positions."""
        return bool(self.header["scene"].get("contraction", False))


def _tensor(buffers, name, device, dtype) -> Tensor | None:
    if name is None:
        return None
    return torch.from_numpy(np.array(buffers[name], dtype=np.float32)).to(device=device, dtype=dtype)


def mlp_from_header(spec: dict, buffers, device, dtype) -> MLP:
    steps = []
    for entry in spec["steps"]:
        tensors = {
            key: _tensor(buffers, entry.get(key), device, dtype)
            for key in ("weight", "bias", "skip_weight", "norm_projection", "out_weight", "out_bias")
        }
        options = {
            key: entry[key]
            for key in (
                "activation",
                "num_features",
                "degree",
                "feature_map",
                "scaling",
                "use_norm",
                "augmented_dim",
                "norm_rows",
                "norm_constant",
            )
            if key in entry
        }
        steps.append(Step(kind=entry["kind"], **tensors, **options))
    return MLP(spec["in_dim"], steps, spec.get("out_activation"))


def _encoding(spec: dict, device, dtype) -> Encoding:
    return Encoding(
        torch.tensor(spec["frequencies"], device=device, dtype=dtype), spec["scale"], spec["include_input"]
    )


def grid_from_header(spec: dict, buffers, device, dtype) -> HashGrid:
    primes = tuple(spec.get("hash", {}).get("primes", HASH_PRIMES))
    if primes != HASH_PRIMES:
        raise ValueError(f"the hash grid's primes are {primes}; this reader hashes with {HASH_PRIMES}")
    return HashGrid(
        _tensor(buffers, spec["table"], device, dtype),
        torch.tensor(spec["resolutions"], device=device, dtype=dtype),
        int(spec["table_size"]),
    )


def field_from_header(spec: dict, buffers, device, dtype) -> NeRFField | ZipNeRFDensity:
    """A field of either head from its header entry (a Zip-NeRF field has a ``grid``)."""
    if "grid" in spec:
        density = (
            grid_from_header(spec["grid"], buffers, device, dtype),
            mlp_from_header(spec["density"], buffers, device, dtype),
            torch.tensor(spec["bounds"], device=device, dtype=dtype),
            float(spec["density_bias"]),
            bool(spec.get("contraction", False)),
        )
        if "view" not in spec:
            return ZipNeRFDensity(*density)
        return ZipNeRFField(
            *density,
            mlp_from_header(spec["view"], buffers, device, dtype),
            int(spec["direction_frequencies"]),
            float(spec["rgb_padding"]),
        )
    return NeRFField(
        _encoding(spec["position_encoding"], device, dtype),
        _encoding(spec["direction_encoding"], device, dtype),
        mlp_from_header(spec["trunk"], buffers, device, dtype),
        mlp_from_header(spec["density"], buffers, device, dtype),
        mlp_from_header(spec["color"], buffers, device, dtype),
    )


def load_export(
    path: Path | str, device: str | torch.device | None = None, dtype: torch.dtype = torch.float32
) -> ExportedField:
    """The export at ``path`` (a directory from ``eugen-export`` or its ``field.eugen``) on ``device`` (default:
    CUDA when available); float16 buffers are widened to ``dtype``. A file that is not a readable export of a
    supported head raises :class:`~eugen_nerf.export.format.ExportFormatError` with one line."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    parsed = fmt.read(Path(path))
    header, buffers = parsed.header, parsed.buffers
    if header.get("head") not in HEADS:
        raise fmt.ExportFormatError(
            f"{parsed.path}: field head {header.get('head')!r}; this reader renders {', '.join(HEADS)}"
        )
    try:
        fields = {
            name: field_from_header(spec, buffers, device, dtype) for name, spec in header["fields"].items()
        }
        scene = header["scene"]
        occupancy = header["occupancy"]
        grid = torch.from_numpy(np.array(buffers[occupancy["buffer"]])).to(device) > 0
        cameras = [
            Camera(
                c["width"],
                c["height"],
                c["fx"],
                c["fy"],
                c["cx"],
                c["cy"],
                torch.tensor(c["camera_to_world"], dtype=dtype, device=device),
                c.get("name", ""),
                tuple(float(v) for v in c.get("distortion", NO_DISTORTION)),
            )
            for c in header["cameras"]
        ]
        return ExportedField(
            header,
            fields,
            grid,
            torch.tensor(scene["bounds"], dtype=dtype, device=device),
            float(scene["near"]),
            float(scene["far"]),
            None
            if scene["background"] == LAST_SAMPLE
            else torch.tensor(scene["background"], dtype=dtype, device=device),
            cameras,
            parsed.path,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise fmt.ExportFormatError(
            f"{parsed.path}: inconsistent header ({type(error).__name__}: {error})"
        ) from None
