"""Rendered frames turned into what a hand-held camera delivers: a wobbly orbit, exposure that drifts from
frame to frame, sensor noise, and JPEGs whose EXIF states the focal length as a camera writes it.

Structure from motion (COLMAP, directly or through ``ns-process-data``) is the user of these photographs:
it needs texture everywhere in view and overlap between neighbouring frames, takes its focal-length prior
from the EXIF when it reads the JPEGs themselves (``ns-process-data`` re-encodes them first, which drops
the EXIF), and must cope with what real photographs have and clean renders lack. The photographs carry no
poses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eugen_nerf.scenes.cameras import look_at

FULL_FRAME_WIDTH_MM = 36.0
"""Width of a 35 mm film frame: ``FocalLengthIn35mmFilm`` is the focal length on this width."""

EXIF_IFD = 0x8769
TAG_MAKE, TAG_MODEL, TAG_ORIENTATION, TAG_SOFTWARE = 0x010F, 0x0110, 0x0112, 0x0131
TAG_EXPOSURE_TIME, TAG_ISO, TAG_DATETIME_ORIGINAL = 0x829A, 0x8827, 0x9003
TAG_FOCAL_LENGTH, TAG_FOCAL_35MM = 0x920A, 0xA405
TAG_FOCAL_PLANE_X, TAG_FOCAL_PLANE_Y, TAG_FOCAL_PLANE_UNIT = 0xA20E, 0xA20F, 0xA210
FOCAL_PLANE_UNIT_MM = 4
"""EXIF FocalPlaneResolutionUnit: 2 inch, 3 cm, 4 mm."""


@dataclass(frozen=True)
class Lens:
    """A camera body and lens as EXIF describes them: sensor width and focal length in millimetres."""

    focal_mm: float = 4.8
    sensor_width_mm: float = 5.6
    """Together with ``focal_mm``: a phone-like wide lens, about 31 mm full-frame equivalent."""
    make: str = "EUGen"
    model: str = "Blender Cycles hand-held"

    def focal_pixels(self, width: int, height: int) -> float:
        """Focal length in pixels for an image of ``width`` x ``height`` (the sensor's long side is its width)."""
        return self.focal_mm / self.sensor_width_mm * max(width, height)

    @property
    def focal_35mm(self) -> int:
        """The 35 mm-equivalent focal length, rounded to whole millimetres as cameras store it."""
        return round(self.focal_mm * FULL_FRAME_WIDTH_MM / self.sensor_width_mm)

    def camera_angle_x(self, width: int, height: int) -> float:
        """Horizontal field of view in radians."""
        return 2.0 * math.atan(0.5 * width / self.focal_pixels(width, height))


@dataclass(frozen=True)
class Handheld:
    """A person walking once around a table with a camera held at chest height, aiming at the object.

    Units are the scene's (metres). The walk is not uniform, the height sways, the hand shakes, and the aim
    wanders a little around the target; every wobble is smooth from frame to frame, as a walk is.
    """

    num_frames: int = 120
    radius: float = 2.4
    """Mean horizontal distance from ``target``."""
    radius_sway: float = 0.25
    height: float = 1.45
    """Mean camera height above the world's z = 0 (the floor)."""
    height_sway: float = 0.3
    """The camera rises and falls by up to this much over the walk (two slow cycles)."""
    target: tuple[float, float, float] = (0.0, 0.0, 0.85)
    shake: float = 0.02
    """Standard deviation of the hand's position wobble."""
    aim_wander: float = 0.06
    """Standard deviation of the aim point's wander around ``target``."""
    roll_deg: float = 2.0
    """Standard deviation of the camera's roll."""
    turns: float = 1.0
    seed: int = 0


def smooth_noise(rng: np.random.Generator, count: int, dims: int, correlation: float = 6.0) -> np.ndarray:
    """(count, dims) unit-variance noise smoothed over about ``correlation`` frames (a Gaussian filter)."""
    pad = int(4 * correlation)
    white = rng.normal(size=(count + 2 * pad, dims))
    offsets = np.arange(-pad, pad + 1)
    kernel = np.exp(-0.5 * (offsets / correlation) ** 2)
    kernel /= np.sqrt((kernel**2).sum())
    smooth = np.stack([np.convolve(white[:, d], kernel, mode="valid") for d in range(dims)], axis=1)
    return smooth[:count]


def handheld_poses(path: Handheld) -> np.ndarray:
    """(N, 4, 4) camera-to-world poses in temporal order (OpenGL convention, world +z up)."""
    if path.num_frames < 3:
        raise ValueError(f"a hand-held orbit needs at least 3 frames, got {path.num_frames}")
    rng = np.random.default_rng(path.seed)
    t = np.arange(path.num_frames) / path.num_frames
    # walking speed varies by +-25 % (the azimuth is the integral of the speed)
    speed = 1.0 + 0.25 * smooth_noise(rng, path.num_frames, 1, correlation=10.0)[:, 0]
    azimuth = rng.uniform(0, 2 * math.pi) + 2 * math.pi * path.turns * np.cumsum(speed) / speed.sum()
    radius = path.radius + path.radius_sway * np.sin(2 * math.pi * t * 1.5 + rng.uniform(0, 2 * math.pi))
    height = path.height + path.height_sway * np.sin(4 * math.pi * t + rng.uniform(0, 2 * math.pi))
    target = np.asarray(path.target, dtype=np.float64)
    positions = np.stack(
        [target[0] + radius * np.cos(azimuth), target[1] + radius * np.sin(azimuth), height], axis=1
    )
    positions += path.shake * smooth_noise(rng, path.num_frames, 3, correlation=3.0)
    aims = target + path.aim_wander * smooth_noise(rng, path.num_frames, 3, correlation=8.0)
    rolls = np.radians(path.roll_deg) * smooth_noise(rng, path.num_frames, 1, correlation=5.0)[:, 0]
    poses = []
    for position, aim, roll in zip(positions, aims, rolls):
        pose = look_at(position - aim)
        pose[:3, 3] = position
        c, s = math.cos(roll), math.sin(roll)
        pose[:3, :3] = pose[:3, :3] @ np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        poses.append(pose)
    return np.stack(poses)


@dataclass(frozen=True)
class Exposure:
    """Per-frame photographic changes, all drawn from one seed."""

    ev_std: float = 0.12
    """Auto-exposure drift: standard deviation of the exposure offset in stops (smooth across frames)."""
    white_balance_std: float = 0.01
    """Per-channel gain jitter of the white balance (relative)."""
    shot_noise: float = 3e-4
    """Signal-dependent noise variance per unit of linear intensity (photon noise)."""
    read_noise: float = 2e-3
    """Standard deviation of the signal-independent noise (linear intensity)."""
    base_exposure_time: float = 1 / 60
    iso: int = 200
    seed: int = 0


def srgb_to_linear(values: np.ndarray) -> np.ndarray:
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(values: np.ndarray) -> np.ndarray:
    values = np.clip(values, 0.0, 1.0)
    return np.where(values <= 0.0031308, values * 12.92, 1.055 * values ** (1 / 2.4) - 0.055)


@dataclass(frozen=True)
class FrameExposure:
    """What one photograph's camera did: its exposure offset (stops) and white-balance gains."""

    ev: float
    gains: tuple[float, float, float]
    noise_seed: int


def frame_exposures(count: int, exposure: Exposure) -> list[FrameExposure]:
    """The exposure offset and white balance of each of ``count`` frames (smooth drift, seeded)."""
    rng = np.random.default_rng(exposure.seed)
    ev = exposure.ev_std * smooth_noise(rng, count, 1, correlation=4.0)[:, 0]
    gains = 1.0 + exposure.white_balance_std * smooth_noise(rng, count, 3, correlation=8.0)
    seeds = rng.integers(0, 2**31 - 1, size=count)
    return [
        FrameExposure(float(e), tuple(float(g) for g in gain), int(s)) for e, gain, s in zip(ev, gains, seeds)
    ]


def photograph(image: np.ndarray, frame: FrameExposure, exposure: Exposure) -> np.ndarray:
    """An sRGB render (H, W, 3) in [0, 1] as the camera would record it: exposure and white balance applied
    in linear light, Poisson-Gaussian sensor noise, back to sRGB, clipped, as uint8."""
    linear = srgb_to_linear(np.asarray(image, dtype=np.float64)[..., :3])
    linear = linear * (2.0**frame.ev) * np.asarray(frame.gains)
    rng = np.random.default_rng(frame.noise_seed)
    sigma = np.sqrt(exposure.shot_noise * np.clip(linear, 0.0, None) + exposure.read_noise**2)
    noisy = linear + sigma * rng.normal(size=linear.shape)
    return np.round(linear_to_srgb(noisy) * 255.0).astype(np.uint8)


def exif_bytes(
    lens: Lens, frame: FrameExposure, exposure: Exposure, width: int, height: int, index: int
) -> bytes:
    """EXIF as a camera writes it: make, model, focal length in mm, its 35 mm equivalent, the focal-plane
    resolution (pixels per mm of sensor), exposure time, ISO and a capture time one second apart."""
    from PIL import Image

    exif = Image.Exif()
    exif[TAG_MAKE] = lens.make
    exif[TAG_MODEL] = lens.model
    exif[TAG_ORIENTATION] = 1
    exif[TAG_SOFTWARE] = "eugen-scenes"
    sub = exif.get_ifd(EXIF_IFD)
    pixels_per_mm = max(width, height) / lens.sensor_width_mm
    sub[TAG_FOCAL_LENGTH] = float(lens.focal_mm)
    sub[TAG_FOCAL_35MM] = lens.focal_35mm
    sub[TAG_FOCAL_PLANE_X] = float(pixels_per_mm)
    sub[TAG_FOCAL_PLANE_Y] = float(pixels_per_mm)
    sub[TAG_FOCAL_PLANE_UNIT] = FOCAL_PLANE_UNIT_MM
    sub[TAG_EXPOSURE_TIME] = float(exposure.base_exposure_time * 2.0**frame.ev)
    sub[TAG_ISO] = exposure.iso
    minutes, seconds = divmod(index, 60)
    sub[TAG_DATETIME_ORIGINAL] = f"2026:01:01 12:{minutes % 60:02d}:{seconds:02d}"
    return exif.tobytes()


def write_photograph(
    path: Path,
    image: np.ndarray,
    lens: Lens,
    frame: FrameExposure,
    exposure: Exposure,
    index: int,
    quality: int = 92,
) -> None:
    """Write one rendered sRGB frame (float in [0, 1]) as the camera's JPEG, EXIF included."""
    from PIL import Image

    pixels = photograph(image, frame, exposure)
    height, width = pixels.shape[:2]
    exif = exif_bytes(lens, frame, exposure, width, height, index)
    Image.fromarray(pixels).save(path, "JPEG", quality=quality, exif=exif, subsampling=0)


def read_exif_focal(path: Path) -> dict[str, float]:
    """The focal-length fields of a JPEG's EXIF (what COLMAP reads for its focal-length prior)."""
    from PIL import Image

    with Image.open(path) as image:
        sub = image.getexif().get_ifd(EXIF_IFD)
    return {
        "focal_mm": float(sub[TAG_FOCAL_LENGTH]),
        "focal_35mm": float(sub[TAG_FOCAL_35MM]),
        "focal_plane_pixels_per_mm": float(sub[TAG_FOCAL_PLANE_X]),
    }
