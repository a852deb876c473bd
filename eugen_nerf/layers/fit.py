"""Closed-form fitting of ``Y ≈ F Aᵀ + c``: streaming normal equations and a ridge solve.

Distillation never holds all activations: each batch adds ``FᵀF``, ``FᵀY``, ``ΣF``, ``ΣY`` and
``ΣY²`` (float64) to a :class:`NormalEquations`, which can be saved, resumed and all-reduced across
processes. The intercept ``c`` is solved for (features are centred inside the solve), so the ridge
penalty never shrinks the bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _require_finite(name: str, tensor: torch.Tensor) -> None:
    if not torch.isfinite(tensor).all():
        bad = (~torch.isfinite(tensor)).sum().item()
        raise ValueError(
            f"{name} must be finite: found {bad} NaN/inf values in a tensor of shape {tuple(tensor.shape)}"
        )


@dataclass
class RidgeSolution:
    weight: torch.Tensor  # (out, M): A
    bias: torch.Tensor  # (out,): c
    ridge: float
    r2: torch.Tensor  # (out,) coefficient of determination on the accumulated data


class NormalEquations:
    """Accumulates the sufficient statistics of a least-squares fit ``Y ≈ F Aᵀ + c``."""

    STATE_KEYS = ("gram", "cross", "feature_sum", "target_sum", "target_sq_sum", "count")

    def __init__(
        self,
        num_features: int,
        num_outputs: int,
        device: torch.device | None = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if num_features < 1 or num_outputs < 1:
            raise ValueError(f"num_features and num_outputs must be >= 1, got {num_features}, {num_outputs}")
        self.num_features, self.num_outputs = num_features, num_outputs
        self.gram = torch.zeros(num_features, num_features, device=device, dtype=dtype)
        self.cross = torch.zeros(num_features, num_outputs, device=device, dtype=dtype)
        self.feature_sum = torch.zeros(num_features, device=device, dtype=dtype)
        self.target_sum = torch.zeros(num_outputs, device=device, dtype=dtype)
        self.target_sq_sum = torch.zeros(num_outputs, device=device, dtype=dtype)
        self.count = torch.zeros((), device=device, dtype=dtype)

    @torch.no_grad()
    def update(
        self, features: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None
    ) -> None:
        """Add a batch: ``features`` ``(N, M)``, ``targets`` ``(N, out)``; leading dims are flattened.

        ``weights`` ``(N,)`` (>= 0) weigh each row's squared error: the solve then minimises
        ``Σ w ‖y - (Aᵀf + c)‖²`` and ``count`` is the total weight.
        """
        features = features.reshape(-1, features.shape[-1])
        targets = targets.reshape(-1, targets.shape[-1])
        if features.shape[1] != self.num_features:
            raise ValueError(
                f"features must have {self.num_features} columns, got shape {tuple(features.shape)}"
            )
        if targets.shape[1] != self.num_outputs:
            raise ValueError(
                f"targets must have {self.num_outputs} columns, got shape {tuple(targets.shape)}"
            )
        if features.shape[0] != targets.shape[0]:
            raise ValueError(
                f"features and targets must have as many rows: {features.shape[0]} != {targets.shape[0]}"
            )
        _require_finite("features", features)
        _require_finite("targets", targets)
        f = features.to(self.gram)
        y = targets.to(self.gram)
        if weights is None:
            wf, wy, count = f, y, f.shape[0]
        else:
            w = weights.reshape(-1, 1).to(self.gram)
            if w.shape[0] != f.shape[0]:
                raise ValueError(f"weights must have one entry per row: {w.shape[0]} != {f.shape[0]}")
            _require_finite("weights", w)
            if (w < 0).any():
                raise ValueError("weights must be >= 0")
            wf, wy, count = f * w, y * w, w.sum()
        self.gram.addmm_(wf.T, f)
        self.cross.addmm_(wf.T, y)
        self.feature_sum += wf.sum(0)
        self.target_sum += wy.sum(0)
        self.target_sq_sum += (wy * y).sum(0)
        self.count += count

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {key: getattr(self, key).clone() for key in self.STATE_KEYS}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for key in self.STATE_KEYS:
            current = getattr(self, key)
            if state[key].shape != current.shape:
                raise ValueError(
                    f"saved {key} has shape {tuple(state[key].shape)}, expected {tuple(current.shape)}"
                )
            current.copy_(state[key])

    def all_reduce(self) -> None:
        """Sum the statistics over all processes of the default ``torch.distributed`` group."""
        import torch.distributed as dist

        for key in self.STATE_KEYS:
            dist.all_reduce(getattr(self, key), op=dist.ReduceOp.SUM)

    def restrict(self, columns: torch.Tensor) -> NormalEquations:
        """The statistics of the fit on the features ``columns`` only (a new object; the targets' are shared
        values, copied): what the same rows would have accumulated for a layer with just those features."""
        columns = torch.as_tensor(columns, dtype=torch.long, device=self.gram.device)
        out = NormalEquations(
            columns.numel(), self.num_outputs, device=self.gram.device, dtype=self.gram.dtype
        )
        out.gram.copy_(self.gram[columns][:, columns])
        out.cross.copy_(self.cross[columns])
        out.feature_sum.copy_(self.feature_sum[columns])
        for key in ("target_sum", "target_sq_sum", "count"):
            getattr(out, key).copy_(getattr(self, key))
        return out

    def merge_(self, other: NormalEquations) -> NormalEquations:
        for key in self.STATE_KEYS:
            getattr(self, key).add_(getattr(other, key))
        return self

    def centred_gram(self) -> torch.Tensor:
        """``Σ (f - f̄)(f - f̄)ᵀ``: the features' scatter about their mean."""
        if self.count <= 0:
            raise ValueError("no samples (or zero total weight) accumulated: call update() first")
        return self._centred()[0]

    def _centred(self):
        n = self.count
        mean_f = self.feature_sum / n
        mean_y = self.target_sum / n
        gram = self.gram - n * torch.outer(mean_f, mean_f)
        cross = self.cross - n * torch.outer(mean_f, mean_y)
        return gram, cross, mean_f, mean_y

    def solve(self, ridge: float = 1e-6, standardise: bool = True) -> RidgeSolution:
        """Ridge solution; ``ridge`` is relative to the centred Gram matrix's diagonal.

        ``standardise``: each feature's penalty is ``ridge`` times its own variance (the ridge of the fit on
        standardised features), so feature orders of very different scale are shrunk alike; otherwise one
        penalty, ``ridge`` times the mean variance, for all. Cholesky with growing jitter; ``lstsq`` as the
        last resort for a singular system.
        """
        if ridge < 0:
            raise ValueError(f"ridge must be >= 0, got {ridge}")
        if self.count <= 0:
            raise ValueError("no samples (or zero total weight) accumulated: call update() before solve()")
        gram, cross, mean_f, mean_y = self._centred()
        variances = gram.diagonal()
        mean_variance = variances.mean().clamp_min(torch.finfo(gram.dtype).tiny)
        penalty = (
            torch.diag(variances.clamp_min(mean_variance * 1e-12))
            if standardise
            else mean_variance * torch.eye(self.num_features, dtype=gram.dtype, device=gram.device)
        )
        weight_t = None
        for jitter in (0.0, 1e-12, 1e-10, 1e-8):
            factor, info = torch.linalg.cholesky_ex(gram + (ridge + jitter) * penalty)
            if info.item() == 0:
                weight_t = torch.cholesky_solve(cross, factor)
                break
        if (
            weight_t is None
        ):  # singular: on the CPU, whose drivers handle rank deficiency (CUDA's gels does not)
            system = (gram + ridge * penalty).cpu()
            weight_t = torch.linalg.lstsq(system, cross.cpu(), driver="gelsd").solution.to(gram.device)
        bias = mean_y - mean_f @ weight_t
        return RidgeSolution(
            weight=weight_t.T.contiguous(), bias=bias, ridge=ridge, r2=self.r2(weight_t.T, bias)
        )

    def reduce_rank(self, solution: RidgeSolution, rank: int) -> RidgeSolution:
        """The best rank-``rank`` fit on the accumulated data, from a full-rank ``solution`` (reduced-rank
        regression): ``A`` projected onto the top eigenvectors of the fitted values' covariance ``A Σ Aᵀ``, the
        intercept solved again. With ``A`` the least-squares solution this minimises the squared error over
        every rank-``rank`` ``A`` (Eckart–Young in the data's metric, not the weight's: a truncated SVD of ``A``
        alone ignores which inputs occur)."""
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        gram, _, mean_f, mean_y = self._centred()
        weight = solution.weight.to(gram)
        if rank < min(weight.shape):
            fitted = weight @ (gram / self.count) @ weight.T
            vectors = torch.linalg.eigh(fitted).eigenvectors[:, -rank:]
            weight = vectors @ (vectors.T @ weight)
        bias = mean_y - weight @ mean_f
        return RidgeSolution(
            weight=weight.contiguous(), bias=bias, ridge=solution.ridge, r2=self.r2(weight, bias)
        )

    def residuals(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Per-output sum of squared residuals of ``F Aᵀ + c`` on the accumulated data (from the statistics)."""
        a = weight.to(self.gram).T  # (M, out)
        c = bias.to(self.gram)
        # Σ‖y - (Fa + c)‖² expanded: Σy² - 2(aᵀFᵀy + cΣy) + aᵀFᵀFa + 2cΣFa + n c²
        return (
            self.target_sq_sum
            - 2 * ((a * self.cross).sum(0) + c * self.target_sum)
            + (a * (self.gram @ a)).sum(0)
            + 2 * c * (self.feature_sum @ a)
            + self.count * c.square()
        )

    def totals(self) -> torch.Tensor:
        """Per-output sum of squared deviations from the mean target (R²'s denominator)."""
        return self.target_sq_sum - self.target_sum.square() / self.count

    def r2(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Per-output R² of ``F Aᵀ + c`` on the accumulated data (from the statistics alone). An output that
        never varies (a dead ReLU unit of a teacher) has no R² of its own: it reads as a huge negative number
        unless fitted exactly, so pool outputs with :meth:`pooled_r2`, not by averaging these."""
        total = self.totals()
        return 1 - self.residuals(weight, bias) / total.clamp_min(torch.finfo(total.dtype).tiny)

    def pooled_r2(self, weight: torch.Tensor, bias: torch.Tensor) -> float:
        """``1 - Σ_k residual_k / Σ_k total_k`` over the outputs: the fraction of all the targets' variance
        explained, finite when some outputs never vary; nan with fewer than two samples or no variance."""
        if self.count < 2:
            return float("nan")
        total = self.totals().sum()
        if total <= 0:
            return float("nan")
        return float(1 - self.residuals(weight, bias).sum() / total)
