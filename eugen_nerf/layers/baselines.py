"""Honest baselines with the same interface as :class:`EUGenLinear`.

Every EUGen result is reported beside a dense layer of matched budget, a learned low-rank layer,
and an SNNK-style ReLU random-feature layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from eugen_nerf.layers.eugen import EUGenLinear, check_int


class LowRankLinear(nn.Module):
    """``y = U (V x) + b`` with both factors learned: ``rank·(d + l)`` parameters and MACs."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        rank: int,
        bias: bool = True,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value in [("in_features", in_features), ("out_features", out_features), ("rank", rank)]:
            check_int(name, value)
        self.in_features, self.out_features, self.rank = in_features, out_features, rank
        factory = {"device": device, "dtype": dtype}
        self.down = nn.Parameter(torch.empty(rank, in_features, **factory))
        self.up = nn.Parameter(torch.empty(out_features, rank, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        # Scale so U V x has the variance nn.Linear's default init gives W x.
        nn.init.uniform_(self.down, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))
        nn.init.uniform_(self.up, -1 / math.sqrt(rank), 1 / math.sqrt(rank))
        if self.bias is not None:
            nn.init.uniform_(self.bias, -1 / math.sqrt(in_features), 1 / math.sqrt(in_features))

    @classmethod
    def from_dense(cls, linear: nn.Linear, rank: int) -> LowRankLinear:
        """Best rank-``rank`` approximation of a dense layer (truncated SVD, Eckart–Young)."""
        layer = cls(
            linear.in_features,
            linear.out_features,
            rank,
            bias=linear.bias is not None,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
        )
        return layer.load_product_(linear.weight, linear.bias)

    @torch.no_grad()
    def load_product_(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> LowRankLinear:
        """Set ``U V`` to the best rank-``rank`` approximation of ``weight`` (exact when its rank is at most
        ``rank``, as a reduced-rank fit's is), split evenly between the factors; and the bias. A rank above
        ``min(d, l)`` (a narrow layer at EUGen's parameter count) holds ``weight`` exactly, the extra factor
        rows and columns zero."""
        u, s, vh = torch.linalg.svd(weight.detach().double(), full_matrices=False)
        kept = min(self.rank, s.numel())
        root = s[:kept].sqrt()
        self.up.zero_()
        self.down.zero_()
        self.up[:, :kept].copy_(u[:, :kept] * root)
        self.down[:kept].copy_(root.unsqueeze(1) * vh[:kept])
        if bias is not None and self.bias is not None:
            self.bias.copy_(bias)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(nn.functional.linear(x, self.down), self.up, self.bias)

    def macs_per_point(self) -> int:
        return self.rank * (self.in_features + self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}"


def snnk_linear(
    in_features: int, out_features: int, num_features: int = 64, seed: int = 0, **kwargs
) -> EUGenLinear:
    """SNNK-style ReLU random-feature layer: ``A · ReLU(G [x; 1]) + c``.

    The special case of an EUGen layer with degree 1, ReLU feature map and no norm entry
    (the random-feature form of the arc-cosine/ReLU kernel used by Scalable Neural Network Kernels).
    ``scaling="polynomial"``: at degree 1 that is ``ReLU(G [x; 1])`` itself, SNNK's homogeneous form.
    """
    return EUGenLinear(
        in_features,
        out_features,
        num_features=num_features,
        degree=1,
        use_norm=False,
        feature_map="relu",
        seed=seed,
        scaling="polynomial",
        **kwargs,
    )
