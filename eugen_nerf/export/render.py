"""The reference renderer of exported fields: torch only, any device.

Two samplings, both stated by :class:`Sampling`:

* ``"nerfstudio"``: vanilla NeRF's own at evaluation: ``coarse_samples`` uniform samples through the
  ``coarse`` field between the planes nerfstudio renders with (its collider resets the near plane to 0 outside
  training), then ``importance_samples`` more drawn from the coarse weights (nerfstudio's ``PDFSampler``
  at evaluation: deterministic, 0.01 histogram padding, the coarse samples kept), the ``fine`` field at all of
  them. The same picture as ``ns-render`` of the run, from the export alone.
  For the Zip-NeRF head, Zip-NeRF's own: ``proposal_samples[0]`` intervals of its initial sampler (uniform;
  on an unbounded scene uniform in distance up to 1 and in disparity beyond, :data:`INITIAL_SAMPLERS`) through
  the first proposal network, each later level's intervals drawn from the previous level's weights
  (``PDFSampler`` at evaluation, the previous intervals not kept), ``nerf_samples`` intervals through the NeRF
  field; every interval is a frustum of the pixel's cone, read as six multisamples
  (:func:`eugen_nerf.fields.multisample.frustum_multisamples`, its deterministic evaluation pattern), contracted
  first on an unbounded scene.
* ``"march"``: what the web page renders: ``samples`` uniform intervals between near and far (on an unbounded
  scene uniform in disparity beyond distance 1, read in the contracted space, the background each ray's colour
  at its last interval) through one field
  (``fine``; for Zip-NeRF ``nerf``, each interval read at one point, its middle, blurred as the frustum's
  multisamples are there), a sample counting only inside the occupancy grid's box and in an occupied cell
  (``occupancy=True``; elsewhere its density is taken as 0), colour evaluated only where a sample's weight is at
  least ``min_weight``, and the march stopped once the transmittance falls below ``termination``
  (``early_termination=True``). With both off it is plain volume rendering of the field.

Both composite on the export's background (on an unbounded scene, each ray's last sample's colour) and clamp
to ``[0, 1]`` (as nerfstudio does at evaluation), in float32 whatever type the field MLPs computed in (under
autocast their features stay in its type).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from eugen_nerf.export.field import Camera, ExportedField, NeRFField, ZipNeRFDensity
from eugen_nerf.fields.multisample import contract_gaussians, frustum_multisamples, pixel_radius

MULTISAMPLE_STD_SCALE = 0.5
"""A multisample's blur relative to the cone's radius at its distance (Zip-NeRF's, ``frustum_multisamples``)."""


@dataclass(frozen=True)
class Sampling:
    """How rays are sampled (see the module docstring)."""

    kind: Literal["march", "nerfstudio"] = "march"
    samples: int = 128
    """march: uniform intervals between near and far."""
    occupancy: bool = True
    """march: skip samples outside the grid's box or in empty cells."""
    early_termination: bool = True
    """march: stop a ray once its transmittance is below ``termination``."""
    termination: float = 1e-3
    min_weight: float = 1e-5
    """march: a sample whose weight is below this adds no colour (its colour is not evaluated)."""
    field: str | None = None
    """march: the field rendered (None: the export's occupancy field, ``fine`` or ``nerf``)."""
    coarse_samples: int | None = None
    """nerfstudio: uniform samples through the coarse field (None: the run's, from the export)."""
    importance_samples: int | None = None
    """nerfstudio: samples drawn from the coarse weights (None: the run's)."""

    def __post_init__(self) -> None:
        if self.kind not in ("march", "nerfstudio"):  # a typo must not render with the other sampling
            raise ValueError(f"Sampling kind must be 'march' or 'nerfstudio', got {self.kind!r}")


def _directions(camera: Camera, shift_x: float = 0.0, shift_y: float = 0.0) -> Tensor:
    """Unit directions ``(H*W, 3)`` through the pixels' centres (shifted by whole pixels), row by row."""
    c2w = camera.camera_to_world
    device, dtype = c2w.device, c2w.dtype
    y, x = torch.meshgrid(
        torch.arange(camera.height, device=device, dtype=dtype) + 0.5 + shift_y,
        torch.arange(camera.width, device=device, dtype=dtype) + 0.5 + shift_x,
        indexing="ij",
    )
    u, v = (x - camera.cx) / camera.fx, (y - camera.cy) / camera.fy
    if any(camera.distortion):
        u, v = undistort(u, v, camera.distortion)
    local = torch.stack([u, -v, -torch.ones_like(x)], -1)
    directions = (local.reshape(-1, 1, 3) * c2w[:3, :3]).sum(-1)
    return directions / torch.linalg.vector_norm(directions, dim=-1, keepdim=True)


def undistort(
    u: Tensor, v: Tensor, distortion: tuple[float, ...], iterations: int = 10
) -> tuple[Tensor, Tensor]:
    """Normalised image coordinates (OpenCV's: ``v`` down) without the lens's radial and tangential distortion
    ``[k1, k2, k3, k4, p1, p2]``: nerfstudio's Newton iteration (``radial_and_tangential_undistort``, from
    MultiNeRF), step for step, so that a distorted camera's rays are nerfstudio's."""
    k1, k2, k3, k4, p1, p2 = distortion
    x, y = u, v
    for _ in range(iterations):
        r = x * x + y * y
        d = 1.0 + r * (k1 + r * (k2 + r * (k3 + r * k4)))
        fx = d * x + 2 * p1 * x * y + p2 * (r + 2 * x * x) - u
        fy = d * y + 2 * p2 * x * y + p1 * (r + 2 * y * y) - v
        d_r = k1 + r * (2.0 * k2 + r * (3.0 * k3 + r * 4.0 * k4))
        d_x, d_y = 2.0 * x * d_r, 2.0 * y * d_r
        fx_x = d + d_x * x + 2.0 * p1 * y + 6.0 * p2 * x
        fx_y = d_y * x + 2.0 * p1 * x + 2.0 * p2 * y
        fy_x = d_x * y + 2.0 * p2 * y + 2.0 * p1 * x
        fy_y = d + d_y * y + 2.0 * p2 * x + 6.0 * p1 * y
        denominator = fy_x * fx_y - fx_x * fy_y
        solvable = denominator.abs() > 1e-3
        safe = torch.where(solvable, denominator, torch.ones_like(denominator))
        x = x + torch.where(solvable, (fx * fy_y - fy * fx_y) / safe, torch.zeros_like(x))
        y = y + torch.where(solvable, (fy * fx_x - fx * fy_x) / safe, torch.zeros_like(y))
    return x, y


def camera_rays(camera: Camera) -> tuple[Tensor, Tensor]:
    """Origins and unit directions ``(H*W, 3)`` through the pixels' centres, row by row."""
    directions = _directions(camera)
    return camera.camera_to_world[:3, 3].expand_as(directions), directions


def camera_radii(camera: Camera) -> Tensor:
    """Each pixel's cone radius at distance 1 ``(H*W,)``: nerfstudio's pixel area (the distances to the next
    pixel's direction in x and in y, multiplied), as mip-NeRF's radius."""
    directions = _directions(camera)
    dx = torch.linalg.vector_norm(directions - _directions(camera, shift_x=1.0), dim=-1)
    dy = torch.linalg.vector_norm(directions - _directions(camera, shift_y=1.0), dim=-1)
    return pixel_radius(dx * dy)


def spacing_bins(count: int, like: Tensor) -> Tensor:
    """``count + 1`` evenly spaced bin edges in ``[0, 1]`` (nerfstudio's spacing coordinates), ``(1, count + 1)``."""
    return torch.linspace(0.0, 1.0, count + 1, device=like.device, dtype=like.dtype)[None]


INITIAL_SAMPLERS = ("uniform", "uniform_lin_disp_piecewise")
"""Zip-NeRF's first proposal level: nerfstudio's ``UniformSampler`` (object scenes) or
``UniformLinDispPiecewiseSampler`` (unbounded scenes: linear up to distance 1, then linear in disparity)."""


def _lin_disp(x: float, like: Tensor) -> Tensor:
    x = torch.tensor(x, dtype=like.dtype, device=like.device)
    return torch.where(x < 1, x / 2, 1 - 1 / (2 * x))


def to_distance(spacing: Tensor, near: float, far: float, sampler: str = "uniform") -> Tensor:
    """Spacing coordinates to distances along the ray, as nerfstudio's ``sampler`` (:data:`INITIAL_SAMPLERS`)
    maps them."""
    if sampler == "uniform":
        return spacing * far + (1 - spacing) * near
    if sampler != "uniform_lin_disp_piecewise":
        raise ValueError(f"initial sampler {sampler!r}: this renderer reads {', '.join(INITIAL_SAMPLERS)}")
    s_near, s_far = (_lin_disp(plane, spacing) for plane in (near, far))
    s = spacing * s_far + (1 - spacing) * s_near
    return torch.where(s < 0.5, 2 * s, 1 / (2 - 2 * s))


def composite(exported: ExportedField, weights: Tensor, rgb: Tensor) -> Tensor:
    """``sum(w * rgb)`` over each ray's samples ``(R, S)``, ``(R, S, 3)``, on the export's background (a colour,
    or each ray's last sample's colour)."""
    background = rgb[:, -1] if exported.background is None else exported.background
    return (weights[..., None] * rgb).sum(1) + background * (1 - weights.sum(1, keepdim=True))


def weights_of(density: Tensor, deltas: Tensor) -> Tensor:
    """nerfstudio's ``RaySamples.get_weights``: ``alpha_i * exp(-sum_{j<i} sigma_j delta_j)``; ``(R, S)``."""
    dd = deltas * density
    alphas = 1 - torch.exp(-dd)
    transmittance = torch.cat([torch.zeros_like(dd[:, :1]), torch.cumsum(dd[:, :-1], dim=-1)], dim=-1)
    return torch.nan_to_num(alphas * torch.exp(-transmittance))


def pdf_bins(
    bins: Tensor, weights: Tensor, count: int, padding: float, include_original: bool = True
) -> Tensor:
    """nerfstudio's ``PDFSampler`` at evaluation (deterministic): the new sorted edges (with ``bins`` among
    them when ``include_original``)."""
    num_bins = count + 1
    weights = weights + padding
    eps = 1e-5
    total = weights.sum(-1, keepdim=True)
    pad = torch.relu(eps - total)
    weights = weights + pad / weights.shape[-1]
    total = total + pad
    pdf = weights / total
    cdf = torch.min(torch.ones_like(pdf), torch.cumsum(pdf, dim=-1))
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], dim=-1)
    u = torch.linspace(0.0, 1.0 - (1.0 / num_bins), steps=num_bins, device=cdf.device, dtype=cdf.dtype)
    u = (u + 1.0 / (2 * num_bins)).expand(*cdf.shape[:-1], num_bins).contiguous()
    inds = torch.searchsorted(cdf, u, side="right")
    below = torch.clamp(inds - 1, 0, bins.shape[-1] - 1)
    above = torch.clamp(inds, 0, bins.shape[-1] - 1)
    cdf_g0, bins_g0 = torch.gather(cdf, -1, below), torch.gather(bins, -1, below)
    cdf_g1, bins_g1 = torch.gather(cdf, -1, above), torch.gather(bins, -1, above)
    t = torch.clip(torch.nan_to_num((u - cdf_g0) / (cdf_g1 - cdf_g0), 0), 0, 1)
    new = bins_g0 + t * (bins_g1 - bins_g0)
    return torch.sort(torch.cat([bins, new], -1), -1).values if include_original else new


def _shade(field: NeRFField, origins: Tensor, directions: Tensor, bins: Tensor) -> tuple[Tensor, Tensor]:
    """Weights ``(R, S)`` and colours ``(R, S, 3)`` of ``field`` over the bins (every sample evaluated)."""
    mids = (bins[:, :-1] + bins[:, 1:]) / 2
    positions = origins[:, None] + directions[:, None] * mids[..., None]
    dirs = directions[:, None].expand_as(positions)
    density, rgb = field(positions.reshape(-1, 3), dirs.reshape(-1, 3))
    weights = weights_of(density.float().view(mids.shape), bins[:, 1:] - bins[:, :-1])
    return weights, rgb.float().view(*mids.shape, 3)


def _frustums(
    field: ZipNeRFDensity,
    origins: Tensor,
    directions: Tensor,
    radii: Tensor,
    bins: Tensor,
    std_scale: float = MULTISAMPLE_STD_SCALE,
) -> tuple[Tensor, Tensor]:
    """Density ``(R, S)`` and features ``(R * S, width)`` of the frustums between ``bins`` ``(R, S + 1)``."""
    shape = (*bins.shape[:1], bins.shape[1] - 1)
    means, stds = frustum_multisamples(
        origins[:, None].expand(*shape, 3),
        directions[:, None].expand(*shape, 3),
        bins[:, :-1, None],
        bins[:, 1:, None],
        radii[:, None, None].expand(*shape, 1),
        randomize=False,
        std_scale=std_scale,
    )
    density, features = field.density_and_features(
        means.reshape(-1, *means.shape[-2:]), stds.reshape(-1, stds.shape[-1])
    )
    return density.float().view(shape), features


def _proposals(
    exported: ExportedField, origins: Tensor, directions: Tensor, radii: Tensor, sampling: Sampling
) -> Tensor:
    """Zip-NeRF's proposal sampling and rendering at evaluation (see the module docstring)."""
    run = exported.header["sampling"]["nerfstudio"]
    near, far, padding = run["near"], run["far"], run["histogram_padding"]
    std_scale = run.get("multisample_std_scale", MULTISAMPLE_STD_SCALE)
    sampler = run.get("initial_sampler", "uniform")
    counts = [*run["proposal_samples"], run["nerf_samples"]]
    spacing = spacing_bins(counts[0], origins).expand(origins.shape[0], -1)
    for level, name in enumerate(run["proposal_fields"]):
        bins = to_distance(spacing, near, far, sampler)
        density, _ = _frustums(exported.fields[name], origins, directions, radii, bins, std_scale)
        weights = weights_of(density, bins[:, 1:] - bins[:, :-1])
        spacing = pdf_bins(spacing, weights, counts[level + 1], padding, include_original=False)
    bins = to_distance(spacing, near, far, sampler)
    field = exported.fields[exported.header["occupancy"]["field"]]
    density, features = _frustums(field, origins, directions, radii, bins, std_scale)
    weights = weights_of(density, bins[:, 1:] - bins[:, :-1])
    dirs = directions[:, None].expand(*density.shape, 3).reshape(-1, 3)
    rgb = field.color_of(dirs, features).float().view(*density.shape, 3)
    return composite(exported, weights, rgb)


def _nerfstudio(
    exported: ExportedField, origins: Tensor, directions: Tensor, radii: Tensor, sampling: Sampling
) -> Tensor:
    if exported.head == "zipnerf":
        return _proposals(exported, origins, directions, radii, sampling)
    coarse, fine = exported.fields["coarse"], exported.fields["fine"]
    run = exported.header["sampling"]["nerfstudio"]
    near, far = run["near"], run["far"]
    coarse_samples = sampling.coarse_samples or run["coarse_samples"]
    importance_samples = sampling.importance_samples or run["importance_samples"]
    spacing = spacing_bins(coarse_samples, origins).expand(origins.shape[0], -1)
    weights, _ = _shade(coarse, origins, directions, to_distance(spacing, near, far))
    # the importance samples are drawn in spacing coordinates, as nerfstudio's PDFSampler draws them
    spacing = pdf_bins(spacing, weights, importance_samples, run["histogram_padding"])
    weights, rgb = _shade(fine, origins, directions, to_distance(spacing, near, far))
    return composite(exported, weights, rgb)


def contract_points(positions: Tensor) -> Tensor:
    """mip-NeRF 360's scene contraction of points into the ball of radius 2 (where an unbounded export's
    occupancy grid lies)."""
    return contract_gaussians(positions, positions.new_zeros(positions.shape[:-1]))[0]


def occupied(exported: ExportedField, positions: Tensor) -> Tensor:
    """Whether each position lies inside the grid's box in an occupied cell."""
    low, high = exported.bounds[0], exported.bounds[1]
    resolution = torch.tensor(exported.occupancy.shape, device=positions.device)
    unit = (positions - low) / (high - low)
    inside = ((unit >= 0) & (unit < 1)).all(-1)
    cell = (unit * resolution).floor().long().clamp(min=torch.zeros_like(resolution), max=resolution - 1)
    return inside & exported.occupancy[cell[..., 0], cell[..., 1], cell[..., 2]]


def _march(
    exported: ExportedField,
    origins: Tensor,
    directions: Tensor,
    radii: Tensor,
    sampling: Sampling,
    chunk: int = 16,
) -> Tensor:
    """The page's loop, a ``chunk`` of samples of every live ray at a time (the result is the loop's). On an
    unbounded scene the intervals are spaced as Zip-NeRF's first samples are (uniform in disparity beyond
    distance 1), the occupancy grid is read at the contracted positions, and the background is each ray's
    colour at its last interval."""
    field = exported.fields[sampling.field or exported.header["occupancy"]["field"]]
    rays = origins.shape[0]
    spacing = "uniform_lin_disp_piecewise" if exported.contraction else "uniform"
    bins = to_distance(spacing_bins(sampling.samples, origins)[0], exported.near, exported.far, spacing)
    mids, deltas = (bins[:-1] + bins[1:]) / 2, bins[1:] - bins[:-1]
    background = exported.background
    if background is None:  # each ray's colour at its last interval's middle
        last = origins + directions * mids[-1]
        _, features = field.density_and_features(last, MULTISAMPLE_STD_SCALE * radii * mids[-1] / 2**0.5)
        background = field.color_of(directions, features).float()
    color = torch.zeros(rays, 3, device=origins.device, dtype=origins.dtype)
    transmittance = torch.ones(rays, device=origins.device, dtype=origins.dtype)
    live = torch.arange(rays, device=origins.device)
    for start in range(0, sampling.samples, chunk):
        if live.numel() == 0:
            break
        t, delta = mids[start : start + chunk], deltas[start : start + chunk]
        o, d = origins[live], directions[live]
        positions = o[:, None] + d[:, None] * t[None, :, None]  # (L, S, 3)
        # a frustum's blur at its middle (used by Zip-NeRF's grid; NeRF reads points)
        blur = MULTISAMPLE_STD_SCALE * radii[live, None] * t[None] / 2**0.5
        mask = (
            occupied(exported, contract_points(positions) if exported.contraction else positions)
            if sampling.occupancy
            else torch.ones(positions.shape[:2], dtype=torch.bool, device=o.device)
        )
        density = torch.zeros(positions.shape[:2], device=o.device, dtype=o.dtype)
        features = None
        if mask.any():
            sigma, features = field.density_and_features(positions[mask], blur[mask])
            density[mask] = sigma[:, 0].to(density.dtype)
        alpha = 1 - torch.exp(-density * delta)
        # transmittance before each sample: the live value times the chunk's running product
        before = transmittance[live, None] * torch.cumprod(
            torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], 1), 1
        )
        included = before >= sampling.termination if sampling.early_termination else torch.ones_like(mask)
        weight = torch.where(included, before * alpha, torch.zeros_like(alpha))
        shade = mask & (weight >= sampling.min_weight)
        if shade.any():
            keep = shade[mask]
            rgb = field.color_of(d[:, None].expand_as(positions)[shade], features[keep])
            contribution = torch.zeros(*positions.shape[:2], 3, device=o.device, dtype=o.dtype)
            contribution[shade] = weight[shade, None] * rgb
            color[live] += contribution.sum(1)
        transmittance[live] = transmittance[live] * torch.where(
            included, 1 - alpha, torch.ones_like(alpha)
        ).prod(1)
        if sampling.early_termination:
            live = live[transmittance[live] >= sampling.termination]
    return color + background * transmittance[:, None]


@torch.no_grad()
def render_rays(
    exported: ExportedField,
    origins: Tensor,
    directions: Tensor,
    sampling: Sampling | None = None,
    chunk: int = 4096,
    radii: Tensor | None = None,
) -> Tensor:
    """Colours ``(N, 3)`` of rays (unit directions) in the field's frame, ``chunk`` rays at a time; ``radii``
    ``(N,)``: each ray's cone radius at distance 1 (Zip-NeRF's frustums; None: 0, no blur)."""
    sampling = sampling or Sampling()
    render = _nerfstudio if sampling.kind == "nerfstudio" else _march
    if radii is None:
        radii = origins.new_zeros(origins.shape[0])
    out = [
        render(exported, o, d, r, sampling)
        for o, d, r in zip(origins.split(chunk), directions.split(chunk), radii.split(chunk), strict=True)
    ]
    return torch.cat(out).clamp(0.0, 1.0)


def render_view(
    exported: ExportedField,
    camera: Camera | int,
    sampling: Sampling | None = None,
    width: int | None = None,
    height: int | None = None,
    chunk: int = 4096,
) -> Tensor:
    """An ``(H, W, 3)`` image of ``camera`` (or test camera ``camera`` of the export), optionally resized."""
    if isinstance(camera, int):
        if not 0 <= camera < len(exported.cameras):
            raise IndexError(
                f"test camera {camera} of an export with {len(exported.cameras)} (0 to "
                f"{len(exported.cameras) - 1})"
            )
        camera = exported.cameras[camera]
    if width or height:
        camera = camera.resized(width or camera.width, height or camera.height)
    camera = dataclasses.replace(
        camera, camera_to_world=camera.camera_to_world.to(exported.device, exported.bounds.dtype)
    )
    origins, directions = camera_rays(camera)
    image = render_rays(exported, origins, directions, sampling, chunk, camera_radii(camera))
    return image.view(camera.height, camera.width, 3)
