"""``eugen-export``'s work: a trained run (EUGen, its dense twin or a distilled student) to an export file.

Every MLP is written in its merged form (:class:`eugen_nerf.layers.fused.FusedMLP`, built from the trained
layers in float64), so the file holds what the fused inference computes and an EUGen chain's wide hidden
activation is never stored or built. Beside the fields: the occupancy grid baked from the rendered field's
density (``bake_occupancy``), the grid's box, near/far and background in the field's own frame, and the run's
test cameras moved into that frame.

Supported: the NeRF head (``eugen-nerf``, ``dense-nerf`` and ``eugen-distill`` students of them) and the Zip-NeRF
head (``eugen-zipnerf``, ``dense-zipnerf``: the NeRF field's hash table, density and view MLPs, and every
proposal network's table and MLP, so nerfstudio's proposal sampling renders from the file) on an object scene
(no scene contraction, a white or black background); the Zip-NeRF head also on an unbounded scene (scene
contraction, the last sample's colour as background, disparity-spaced initial samples), whose occupancy grid
covers the contracted ball's box ``[-2, 2]^3``. Anything else is refused in one line before a file is written.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
from rich.progress import Progress
from torch import nn

from eugen_nerf.export.field import HASH_PRIMES, LAST_SAMPLE, field_from_header
from eugen_nerf.export.render import MULTISAMPLE_STD_SCALE
from eugen_nerf.inputs.errors import InputError

SUPPORTED = (
    "the NeRF head (eugen-nerf, dense-nerf and their eugen-distill students) and the Zip-NeRF head "
    "(eugen-zipnerf, dense-zipnerf) on an object or (Zip-NeRF only) an unbounded scene"
)
CONTRACTED_BOUNDS = torch.tensor([[-2.0] * 3, [2.0] * 3], dtype=torch.float64)
"""The box the fields of an unbounded scene read positions in: the contracted ball of radius 2."""
ALPHA_THRESHOLDS = {"nerf": 0.001, "zipnerf": 0.01}
"""The occupancy grid's default threshold per head. Zip-NeRF's density is ``softplus(raw - 1)``, about 0.3 where
training never pushed it down (space no camera sees well), which a cell-long step of a 64^3 grid over a box 3
units wide makes 1.4 % opaque: at 0.001 such haze keeps nearly every cell of a briefly trained field occupied
and nothing is skipped (``docs/export.md`` measures what skipping it changes)."""
ACTIVATION_NAMES = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Softplus: "softplus"}


class ExportError(InputError):
    """A run the exporter cannot write (an unsupported head, layer or framing); nothing is written."""


@dataclass
class ExportOptions:
    """What is exported and how."""

    dtype: str = "float32"
    """Weights' storage: float32 or float16 (the page widens either)."""
    grid_resolution: int = 64
    """Cells per axis of the occupancy grid."""
    grid_probes: int = 2
    """Density probes per cell and axis (probes^3 per cell); the cell is occupied if any probe is."""
    alpha_threshold: float | None = None
    """A probe is occupied when a cell-long step through it would be this opaque (1 - exp(-sigma * cell)); None:
    the head's :data:`ALPHA_THRESHOLDS`."""
    dilation: int = 1
    """Occupied cells grow by this many cells (a thin surface between probes is not lost)."""


def _activation(module: nn.Module | None, where: str) -> str | None:
    if module is None:
        return None
    name = ACTIVATION_NAMES.get(type(module))
    if name is None:
        raise ExportError(
            f"{where}: activation {type(module).__name__} is not supported (relu, sigmoid, softplus)"
        )
    return name


class _Writer:
    """Collects buffers under unique names, in the chosen dtype."""

    def __init__(self, dtype: str) -> None:
        self.dtype = np.float16 if dtype == "float16" else np.float32
        self.buffers: dict[str, np.ndarray] = {}

    def add(self, name: str, tensor: torch.Tensor | None) -> str | None:
        if tensor is None:
            return None
        array = tensor.detach().double().cpu().numpy()
        stored = array.astype(self.dtype)
        if not np.isfinite(stored).all():
            where = (
                "is not finite" if not np.isfinite(array).all() else f"exceeds {self.dtype.__name__}'s range"
            )
            raise ExportError(
                f"{name}: a value {where} (largest magnitude {np.abs(array).max():.4g}); "
                + (
                    "export with --dtype float32"
                    if self.dtype is np.float16
                    else "the run's weights are broken"
                )
            )
        self.buffers[name] = stored
        return name


def export_mlp(mlp, name: str, writer: _Writer, out_activation: str | None = None) -> dict:
    """The header entry of an :class:`~eugen_nerf.layers.EUGenMLP` (or a :class:`~eugen_nerf.layers.MergedMLP`,
    or a merged form itself) in merged form (its buffers added); ``out_activation`` replaces the MLP's own."""
    from eugen_nerf.layers import EUGenLinear
    from eugen_nerf.layers.fused import FusedMLP

    fused = mlp if isinstance(mlp, FusedMLP) else mlp.fused()  # both classes hold their merged form
    steps = []
    for i, step in enumerate(fused.steps):
        where = f"{name} layer {i}"
        prefix = f"{name}.{i}."
        weight, bias, skip = step.weight.double(), step.bias.double(), step.skip_weight
        entry: dict = {"activation": _activation(step.activation, where)}
        layer = step.layer
        if layer is None:
            entry["kind"] = "dense"
        else:
            assert isinstance(layer, EUGenLinear)
            if step.factors is None and not layer.shared_projections and layer.degree > 1:
                raise ExportError(
                    f"{where}: EUGen layers with per-order projections (shared_projections False) are not "
                    "supported; export layers whose orders share projections (the default)"
                )
            m = layer.num_features
            projection_rows = weight.shape[0] - step.norm_rows
            norm_projection = step.norm_projection
            if step.factors is not None:  # orders reuse the first order's rows: write every order's rows out
                order = torch.cat([torch.arange(m) if f is None else f.cpu() for f in step.factors]).to(
                    weight.device
                )
                weight = torch.cat([weight[:projection_rows][order], weight[projection_rows:]])
                bias = torch.cat([bias[:projection_rows][order], bias[projection_rows:]])
                skip = skip[order] if skip is not None else None
                norm_projection = norm_projection[order] if norm_projection is not None else None
            entry.update(
                kind="eugen",
                num_features=m,
                degree=layer.degree,
                feature_map=layer.feature_map,
                scaling=layer.scaling,
                use_norm=bool(layer.use_norm),
                augmented_dim=layer.augmented_dim,
                norm_rows=step.norm_rows,
                norm_constant=float(step.norm_constant) if step.norm_constant is not None else None,
                norm_projection=writer.add(prefix + "norm_projection", norm_projection),
                out_weight=writer.add(prefix + "out_weight", step.out_weight),
                out_bias=writer.add(prefix + "out_bias", step.out_bias),
            )
        entry.update(
            weight=writer.add(prefix + "weight", weight),
            bias=writer.add(prefix + "bias", bias),
            skip_weight=writer.add(prefix + "skip_weight", skip),
        )
        steps.append(entry)
    return {
        "in_dim": fused.in_dim,
        "out_activation": out_activation or _activation(fused.out_activation, f"{name} output"),
        "steps": steps,
    }


def _linear_mlp(linear: nn.Linear, activation: str, name: str, writer: _Writer) -> dict:
    bias = linear.bias if linear.bias is not None else torch.zeros(linear.out_features)
    step = {
        "kind": "dense",
        "activation": None,
        "weight": writer.add(name + ".0.weight", linear.weight),
        "bias": writer.add(name + ".0.bias", bias),
        "skip_weight": None,
    }
    return {"in_dim": linear.in_features, "out_activation": activation, "steps": [step]}


def _encoding(encoding) -> dict:
    frequencies = 2 ** torch.linspace(encoding.min_freq, encoding.max_freq, encoding.num_frequencies)
    return {
        "frequencies": frequencies.tolist(),
        "scale": 2 * math.pi,
        "include_input": bool(encoding.include_input),
    }


def export_nerf_field(field: nn.Module, name: str, writer: _Writer) -> dict:
    from eugen_nerf.fields.nerf import EUGenNeRFField

    if not isinstance(field, EUGenNeRFField):
        raise ExportError(f"field {name} is a {type(field).__name__}; the exporter supports {SUPPORTED}")
    training = field.training
    folded = field.eval().folded_heads()  # the heads absorb an EUGen last trunk layer's A, as torch renders
    field.train(training)
    if folded is not None:
        trunk, density, color = folded
        density_entry = export_mlp(density, f"{name}.density", writer, out_activation="softplus")
    else:
        trunk, color = field.trunk, field.color_head
        density_entry = _linear_mlp(field.density_head, "softplus", f"{name}.density", writer)
    return {
        "position_encoding": _encoding(field.position_encoding),
        "direction_encoding": _encoding(field.direction_encoding),
        "trunk": export_mlp(trunk, f"{name}.trunk", writer),
        "density": density_entry,
        "color": export_mlp(color, f"{name}.color", writer),
        "color_input": ["direction", "features"],
    }


def head_of(model: nn.Module) -> str | None:
    """The export head of ``model`` (``nerf`` or ``zipnerf``), None for a model the exporter does not support."""
    from eugen_nerf.models.nerf import EUGenNeRFModel
    from eugen_nerf.models.zipnerf import ZipNeRFModel

    return (
        "nerf"
        if isinstance(model, EUGenNeRFModel)
        else "zipnerf"
        if isinstance(model, ZipNeRFModel)
        else None
    )


def export_hash_grid(grid: nn.Module, name: str, writer: _Writer) -> dict:
    """The header entry of an :class:`~eugen_nerf.fields.zipnerf.AntiAliasedHashGrid` (its table added)."""
    encoding = grid.encoding
    return {
        "table": writer.add(name + ".table", encoding.hash_table),
        "table_size": int(encoding.hash_table_size),
        "resolutions": encoding.scalings.tolist(),
        "features_per_level": int(encoding.features_per_level),
        "hash": {"primes": list(HASH_PRIMES)},
    }


def export_zipnerf_field(field: nn.Module, name: str, bounds: torch.Tensor, writer: _Writer) -> dict:
    """A Zip-NeRF proposal network (grid, density MLP) or NeRF field (and its view MLP)."""
    from eugen_nerf.fields.zipnerf import (
        DENSITY_BIAS,
        DIRECTION_FREQUENCIES,
        RGB_PADDING,
        ZipNeRFField,
    )

    spec = {
        "grid": export_hash_grid(field.grid, f"{name}.grid", writer),
        "density": export_mlp(field.density_mlp, f"{name}.density", writer),
        "density_bias": DENSITY_BIAS,
        "bounds": (CONTRACTED_BOUNDS if field.contraction else bounds).tolist(),
        "contraction": bool(field.contraction),
    }
    if isinstance(field, ZipNeRFField):
        spec.update(
            view=export_mlp(field.view_mlp, f"{name}.view", writer),
            direction_frequencies=DIRECTION_FREQUENCIES,
            rgb_padding=RGB_PADDING,
        )
    return spec


def check_model(model: nn.Module, method: str) -> None:
    """Refuse (one line) a model the exporter does not support."""
    head = head_of(model)
    if head is None:
        raise ExportError(
            f"{method}: its head ({type(model).__name__}) is not supported; eugen-export supports {SUPPORTED}"
        )
    if head == "zipnerf":
        check_zipnerf(model, method)
    framing = model.framing
    if framing.contraction and head != "zipnerf":
        raise ExportError(
            f"{method}: a scene with contraction (unbounded) is supported for the Zip-NeRF head only; "
            f"eugen-export supports {SUPPORTED}"
        )
    backgrounds = ("white", "black", LAST_SAMPLE) if framing.contraction else ("white", "black")
    if framing.background not in backgrounds:
        raise ExportError(
            f"{method}: background {framing.background!r} is not supported ({', '.join(backgrounds)}); "
            "set --pipeline.model.background-color when training"
        )


def check_zipnerf(model: nn.Module, method: str) -> None:
    """Refuse a Zip-NeRF whose grids or sampler the file cannot describe."""
    from nerfstudio.model_components.ray_samplers import UniformLinDispPiecewiseSampler, UniformSampler

    for name, grid in [("field", model.field.grid)] + [
        (f"proposal network {i}", network.grid) for i, network in enumerate(model.proposal_networks)
    ]:
        if grid.encoding.tcnn_encoding is not None:
            raise ExportError(
                f"{method}: its {name}'s hash grid is tiny-cuda-nn's; eugen-export reads the torch grid's table "
                "(train with --pipeline.model.implementation torch)"
            )
    if type(model.proposal_sampler.initial_sampler) not in (UniformSampler, UniformLinDispPiecewiseSampler):
        raise ExportError(
            f"{method}: its proposal sampler starts with {type(model.proposal_sampler.initial_sampler).__name__}; "
            "eugen-export supports the uniform initial sampler of object scenes and the piecewise "
            "linear-disparity one of unbounded scenes"
        )


def initial_sampler_name(model: nn.Module) -> str:
    """The file's name (:data:`~eugen_nerf.export.render.INITIAL_SAMPLERS`) of a Zip-NeRF's initial sampler."""
    from nerfstudio.model_components.ray_samplers import UniformLinDispPiecewiseSampler

    lin_disp = isinstance(model.proposal_sampler.initial_sampler, UniformLinDispPiecewiseSampler)
    return "uniform_lin_disp_piecewise" if lin_disp else "uniform"


def uncontract(points: torch.Tensor) -> torch.Tensor:
    """The positions that the scene contraction maps to ``points`` (inside the ball of radius 2; a point at or
    beyond its edge is taken just inside it, a distance of 1000)."""
    radius = points.norm(dim=-1, keepdim=True).clamp(1e-12, 2 - 1e-3)
    return torch.where(radius > 1, points / radius / (2 - radius), points)


@torch.no_grad()
def bake_occupancy(
    field,
    bounds: torch.Tensor,
    options: ExportOptions,
    progress: Progress | None = None,
    contraction: bool = False,
) -> np.ndarray:
    """``(R, R, R)`` uint8, 1 where the field's density makes a cell-long step at least ``alpha_threshold``
    opaque at any of the cell's ``probes^3`` probes, then dilated. With ``contraction`` the grid is over the
    contracted space and each probe is read at the position contracted onto it."""
    r, p = options.grid_resolution, options.grid_probes
    low, high = bounds[0].double(), bounds[1].double()
    cell = (high - low) / r
    alpha = options.alpha_threshold if options.alpha_threshold is not None else ALPHA_THRESHOLDS["nerf"]
    threshold = -math.log(1 - alpha) / float(cell.max())
    offsets = (torch.arange(p, dtype=torch.float64) + 0.5) / p
    sub = torch.stack(torch.meshgrid(offsets, offsets, offsets, indexing="ij"), -1).reshape(-1, 3)
    grid = np.zeros((r, r, r), dtype=bool)
    task = progress.add_task("occupancy grid", total=r) if progress else None
    index = torch.stack(torch.meshgrid(torch.arange(r), torch.arange(r), indexing="ij"), -1).reshape(-1, 2)
    for x in range(r):
        corners = torch.cat([torch.full((index.shape[0], 1), x), index], 1).double()
        points = (low + (corners[:, None] + sub[None]) * cell).reshape(-1, 3)
        points = (uncontract(points) if contraction else points).float()
        density = torch.cat([field.density_and_features(chunk)[0] for chunk in points.split(65536)])
        grid[x] = (density.view(-1, sub.shape[0]).max(1).values >= threshold).view(r, r).cpu().numpy()
        if progress:
            progress.advance(task)
    for _ in range(options.dilation):
        grown = grid.copy()
        for axis in range(3):
            for shift in (-1, 1):
                rolled = np.roll(grid, shift, axis)
                edge = [slice(None)] * 3
                edge[axis] = 0 if shift == 1 else -1
                rolled[tuple(edge)] = False
                grown |= rolled
        grid = grown
    return grid.astype(np.uint8)


def _cameras(run, origin: torch.Tensor, unit: float) -> list[dict]:
    from nerfstudio.cameras.cameras import CameraType

    cameras = run.pipeline.datamanager.eval_dataset.cameras
    out = []
    for i in range(len(cameras)):
        if int(cameras.camera_type[i]) != CameraType.PERSPECTIVE.value:
            raise ExportError(
                f"{run.config_path}: test camera {i} is not a perspective camera; only perspective cameras are exported"
            )
        c2w = cameras.camera_to_worlds[i].double().clone()
        c2w[:, 3] = (c2w[:, 3] - origin) / unit
        camera = {
            "name": f"test {i}",
            "width": int(cameras.width[i]),
            "height": int(cameras.height[i]),
            "fx": float(cameras.fx[i]),
            "fy": float(cameras.fy[i]),
            "cx": float(cameras.cx[i]),
            "cy": float(cameras.cy[i]),
            "camera_to_world": c2w.tolist(),
        }
        if cameras.distortion_params is not None and bool((cameras.distortion_params[i] != 0).any()):
            camera["distortion"] = [float(v) for v in cameras.distortion_params[i]]  # k1, k2, k3, k4, p1, p2
        out.append(camera)
    return out


def _nerf_fields(model, writer: _Writer) -> tuple[dict, dict]:
    """The NeRF head's fields and its nerfstudio sampling."""
    fields = {
        "coarse": export_nerf_field(model.field_coarse, "coarse", writer),
        "fine": export_nerf_field(model.field_fine, "fine", writer),
    }
    near, far = model.collider_planes()
    sampling = {
        # nerfstudio's collider renders from 0 outside training unless told not to reset the near plane
        "near": 0.0 if getattr(model.collider, "reset_near_plane", True) else near,
        "far": far,
        "coarse_samples": model.sampler_uniform.num_samples,
        "importance_samples": model.sampler_pdf.num_samples,
        "histogram_padding": model.sampler_pdf.histogram_padding,
    }
    return fields, sampling


def _zipnerf_fields(model, bounds: torch.Tensor, writer: _Writer) -> tuple[dict, dict]:
    """The Zip-NeRF head's NeRF field, its proposal networks and its proposal sampling."""
    fields = {"nerf": export_zipnerf_field(model.field, "nerf", bounds, writer)}
    for i, network in enumerate(model.proposal_networks):
        fields[f"proposal_{i}"] = export_zipnerf_field(network, f"proposal_{i}", bounds, writer)
    config = model.config
    levels, networks = config.num_proposal_iterations, len(model.proposal_networks)
    near, far = model.collider_planes()
    sampling = {
        "near": 0.0 if getattr(model.collider, "reset_near_plane", True) else near,
        "far": far,
        "initial_sampler": initial_sampler_name(model),
        "proposal_fields": [f"proposal_{min(i, networks - 1)}" for i in range(levels)],
        "proposal_samples": list(config.num_proposal_samples_per_ray)[:levels],
        "nerf_samples": config.num_nerf_samples_per_ray,
        "histogram_padding": model.proposal_sampler.pdf_sampler.histogram_padding,
        "multisample_std_scale": MULTISAMPLE_STD_SCALE,
    }
    return fields, sampling


def build_export(run, options: ExportOptions, progress: Progress | None = None) -> tuple[dict, dict]:
    """Header and buffers of ``run``'s export (nothing written)."""
    model = run.model
    check_model(model, run.config.method_name)
    head = head_of(model)
    framing = model.framing
    # the frame the field reads positions in: the object's for NeRF, the dataparser's for Zip-NeRF
    if model.renders_in_object_frame:
        origin, unit = torch.tensor(framing.origin, dtype=torch.float64), float(framing.unit)
    else:
        origin, unit = torch.zeros(3, dtype=torch.float64), 1.0
    writer = _Writer(options.dtype)
    if options.alpha_threshold is None:
        options = dataclasses.replace(options, alpha_threshold=ALPHA_THRESHOLDS[head])
    near, far = model.collider_planes()
    aabb = run.pipeline.datamanager.train_dataparser_outputs.scene_box.aabb.double()
    bounds = CONTRACTED_BOUNDS if framing.contraction else (aabb - origin) / unit
    if head == "nerf":
        fields, sampling = _nerf_fields(model, writer)
        rendered = "fine"
    else:
        fields, sampling = _zipnerf_fields(model, bounds, writer)
        rendered = "nerf"
    # the rendered field as the file holds it (its dtype included), so the grid is the one the page's field sees
    parsed = field_from_header(fields[rendered], writer.buffers, torch.device("cpu"), torch.float32)
    occupancy = bake_occupancy(parsed, bounds, options, progress, contraction=framing.contraction)
    writer.buffers["occupancy"] = occupancy
    background = {"white": [1.0, 1.0, 1.0], "black": [0.0, 0.0, 0.0]}.get(framing.background, LAST_SAMPLE)
    header = {
        "head": head,
        "dtype": options.dtype,
        "source": {"method": run.config.method_name, "run": run.name, "step": run.step},
        "scene": {
            "near": near,
            "far": far,
            "background": background,
            "bounds": bounds.tolist(),
            "frame": {"origin": origin.tolist(), "unit": unit},
            "contraction": bool(framing.contraction),
        },
        "occupancy": {
            "buffer": "occupancy",
            "resolution": [options.grid_resolution] * 3,
            "field": rendered,
            "alpha_threshold": options.alpha_threshold,
            "probes": options.grid_probes,
            "dilation": options.dilation,
        },
        "sampling": {"nerfstudio": sampling},
        "fields": fields,
        "macs_per_sample": {},
        "cameras": _cameras(run, origin, unit),
    }
    header["source"]["eugen_layers"] = sum(
        step["kind"] == "eugen"
        for part in ("trunk", "color", "density", "view")
        for step in fields[rendered].get(part, {}).get("steps", [])
    )
    for name, spec in fields.items():
        parsed = field_from_header(spec, writer.buffers, torch.device("cpu"), torch.float32)
        header["macs_per_sample"][name] = parsed.macs_per_point()
    return header, writer.buffers
