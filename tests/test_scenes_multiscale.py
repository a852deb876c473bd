"""Multiscale training rays made from the full-resolution images (eugen_nerf.scenes.multiscale)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from nerfstudio.cameras.cameras import Cameras

from eugen_nerf.scenes.datamanager import FramingDataManagerConfig
from eugen_nerf.scenes.multiscale import assign_scales, block_average, check_scales, stacked_scaled_cameras

SCENES = Path(__file__).resolve().parents[1] / "scenes"


def _cameras(count: int = 2, width: int = 16, height: int = 12) -> Cameras:
    poses = torch.eye(4)[:3].expand(count, 3, 4).clone()
    poses[:, 0, 3] = torch.arange(count, dtype=torch.float32)
    return Cameras(
        camera_to_worlds=poses, fx=20.0, fy=21.0, cx=width / 2, cy=height / 2, width=width, height=height
    )


def test_block_average_is_the_area_mean_and_premultiplies_alpha():
    images = torch.rand(2, 8, 8, 4)
    rows, cols, positions = torch.tensor([0, 4]), torch.tensor([2, 6]), torch.tensor([1, 0])
    average = block_average(images, positions, rows, cols, 2)
    block = images[1, 0:2, 2:4].reshape(-1, 4)
    alpha = block[:, 3].mean()
    assert torch.allclose(average[0, 3], alpha)
    assert torch.allclose(average[0, :3], (block[:, :3] * block[:, 3:]).mean(0) / alpha)
    # the white-background blend of the average is the average of the blends
    blend = lambda rgba: rgba[..., :3] * rgba[..., 3:] + (1 - rgba[..., 3:])
    assert torch.allclose(blend(average[0]), blend(block).mean(0), atol=1e-6)
    rgb = images[..., :3]
    assert torch.allclose(
        block_average(rgb, positions, rows, cols, 2)[1], rgb[0, 4:6, 6:8].reshape(-1, 3).mean(0)
    )
    as_list = [image for image in rgb]
    assert torch.allclose(
        block_average(as_list, positions, rows, cols, 2), block_average(rgb, positions, rows, cols, 2)
    )
    as_bytes = (rgb * 255).round().to(torch.uint8)
    assert torch.allclose(
        block_average(as_bytes, positions, rows, cols, 2),
        block_average(as_bytes.float() / 255, positions, rows, cols, 2),
    )


def test_scales_split_the_rays_evenly():
    index = assign_scales(301, 3, torch.Generator().manual_seed(0))
    assert sorted(torch.bincount(index).tolist()) == [100, 100, 101]
    assert index[:150].float().std() > 0  # shuffled, not in blocks


@pytest.mark.parametrize("scales", [(), (0,), (1, 1), (1, 2.0), (True,)])
def test_bad_scales_are_one_clear_error(scales):
    with pytest.raises(ValueError, match="train-scales"):
        check_scales(scales)


@pytest.mark.parametrize("scale", [2, 4])
def test_a_scaled_ray_goes_through_its_blocks_centre_with_the_blocks_area(scale):
    cameras = _cameras()
    stacked = stacked_scaled_cameras(cameras, (1, scale))
    assert stacked.width[2:].flatten().tolist() == [16 // scale] * 2
    row, col = 1, 2  # block (1, 2): full-resolution pixels [s, 2s) x [2s, 3s)
    scaled = stacked.generate_rays(
        camera_indices=torch.tensor([[3]]), coords=torch.tensor([[row + 0.5, col + 0.5]])
    )
    centre = torch.tensor([[scale * row + scale / 2, scale * col + scale / 2]], dtype=torch.float32)
    full = cameras.generate_rays(camera_indices=torch.tensor([[1]]), coords=centre)
    assert torch.allclose(scaled.origins, full.origins) and torch.allclose(
        scaled.directions, full.directions, atol=1e-6
    )
    # nerfstudio's pixel area is a finite difference to the next pixel: s^2 times larger, to a few percent
    assert torch.allclose(scaled.pixel_area, full.pixel_area * scale**2, rtol=0.05)


def test_datamanager_targets_are_block_averages_of_the_training_images():
    config = FramingDataManagerConfig(train_scales=(1, 2, 4), train_num_rays_per_batch=96)
    config.data = SCENES / "bunny32"
    datamanager = config.setup(device="cpu")
    torch.manual_seed(0)
    bundle, batch = datamanager.next_train(0)
    dataset = datamanager.train_dataset
    areas = bundle.pixel_area.squeeze(-1)
    smallest = areas.min()
    checked = {1: 0, 2: 0, 4: 0}
    for ray in range(len(areas)):
        camera = int(bundle.camera_indices[ray])
        scale = min((1, 2, 4), key=lambda s: abs(float(areas[ray] / smallest) - s * s))
        row, col = (int(v) for v in batch["indices"][ray, 1:])
        image = dataset.get_image_float32(camera)
        top, left = (row // scale) * scale, (col // scale) * scale
        expected = block_average(
            image[None], torch.tensor([0]), torch.tensor([top]), torch.tensor([left]), scale
        )[0]
        assert torch.allclose(batch["image"][ray], expected, atol=1e-5), (ray, scale)
        checked[scale] += 1
    assert all(count >= 20 for count in checked.values()), checked


def test_full_resolution_training_is_nerfstudios():
    config = FramingDataManagerConfig(train_num_rays_per_batch=32)
    config.data = SCENES / "bunny32"
    datamanager = config.setup(device="cpu")
    assert datamanager.multiscale_ray_generator is None
    _, batch = datamanager.next_train(0)
    image = datamanager.train_dataset.get_image_float32(int(batch["indices"][0, 0]))
    assert torch.allclose(batch["image"][0], image[int(batch["indices"][0, 1]), int(batch["indices"][0, 2])])
    assert copy.deepcopy(config).train_scales == (1,)
