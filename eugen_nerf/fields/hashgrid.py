"""nerfstudio's hash grid with a faster pure-torch forward (corners hashed by broadcasting, one gather).

nerfstudio's torch ``HashEncoding`` hashes the eight cell corners in eight passes (int64 modulo included)
and interpolates pairwise; on a CPU that costs several times the MLPs it feeds (most of a Zip-NeRF field's
forward), which would hide any MLP saving. This subclass computes the same
function (same table, hash and trilinear weights; tests compare it with nerfstudio's):

- each axis's two hashed coordinates and two weights are combined by broadcasting over a ``[corner, level,
  point]`` layout (points innermost: with the corners innermost the loops were 2 long and the forward took
  twice as long), and the table size's power of two turns the modulo into a mask, so the hash runs in 32-bit
  integers (only the low bits of the products survive the mask, and wrapping multiplication keeps them);
- the eight corners' rows are read in one gather (without autograd, one corner at a time, each weighted and
  added into the output while its rows are in cache); a row of 1, 2 or 4 float32 features is read as one 4-, 8-
  or 16-byte scalar, about 4x faster on a CPU than gathering rows, with ``index_select`` on 32-bit indices
  (twice as fast as ``torch.take``, which needs 64-bit ones: the conversion is a pass saved too);
- points go through in chunks, so the ``[points, levels, 8, features]`` intermediates stay in cache.
  Together, 196k points on one core (the CPU preset's grid, 6 levels to 512, 2^16 rows of 4 features):
  nerfstudio's forward 0.86 s, this one with ``torch.take`` 0.23 s (0.51 s with the corners innermost);
  nerfacto's default grid (16 levels to 2048, 2^19 rows of 2): 4.20 s and 0.93 s. ``index_select`` on
  32-bit indices then made the forward 1.4x (the preset's grid), 1.6x (nerfacto's) and 1.4x (1 feature a
  level, Zip-NeRF's proposal grids) faster again, timed side by side;
- the backward sums the gradient into the table with ``bincount``, one pass over the indices per feature,
  where ``index_add_`` into a 2-D table runs a tensor operation per index on the CPU: 8 to 80 times faster on
  the CPU preset's grids, which took a Zip-NeRF training step on one core from 0.83 to 0.36 s.

tiny-cuda-nn, where installed, is untouched.
"""

from __future__ import annotations

import torch
from nerfstudio.field_components.encodings import HashEncoding
from torch import Tensor

_PRIMES = (1, 2654435761, 805459861)
CHUNK = 16384
"""Points per pass of the forward on the CPU, where the intermediates of a small chunk stay in cache."""
CHUNK_ACCELERATOR = 1 << 20
"""Points per pass elsewhere (a GPU), where each pass's few dozen kernel launches must stay few."""
_ROW_AS_SCALAR = {4: torch.int32, 8: torch.float64, 16: torch.complex128}
"""Row width in bytes -> a dtype of that size, to gather a row as one element."""


def _as_int32(value: int) -> int:
    """``value`` modulo 2^32 as a signed 32-bit integer."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


_PRIMES_INT32 = tuple(_as_int32(p) for p in _PRIMES)


class _GatherRows(torch.autograd.Function):
    """``table[index]`` for an ``(entries, features)`` table and an int32 or int64 ``index``; backward scatters
    the gradient into the rows."""

    @staticmethod
    def forward(ctx, table: Tensor, index: Tensor) -> Tensor:
        ctx.save_for_backward(index)
        ctx.table_shape = table.shape
        width = table.shape[1] * table.element_size()
        if table.device.type == "cpu" and table.is_contiguous() and width in _ROW_AS_SCALAR:
            rows = table.view(_ROW_AS_SCALAR[width]).view(-1).index_select(0, index.reshape(-1))
            return rows.view(table.dtype).view(*index.shape, table.shape[1])
        return torch.nn.functional.embedding(index, table)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (index,) = ctx.saved_tensors
        entries, width = ctx.table_shape
        index, grad = index.reshape(-1), grad.reshape(-1, width)
        if grad.device.type == "cpu":
            # On the CPU, index_add_ into a 2-D table runs one tensor operation per index; bincount sums each
            # feature column in one pass over the indices (in float64, in index order: deterministic).
            columns = [torch.bincount(index, weights=column, minlength=entries) for column in grad.t()]
            return torch.stack(columns, dim=1).to(grad.dtype), None
        grad_table = grad.new_zeros(ctx.table_shape)
        grad_table.index_add_(0, index, grad)
        return grad_table, None


class GatherHashEncoding(HashEncoding):
    """:class:`HashEncoding` with a faster torch forward; identical outputs and parameters."""

    def pytorch_fwd(self, in_tensor: Tensor) -> Tensor:
        assert in_tensor.shape[-1] == 3
        lead = in_tensor.shape[:-1]
        points = in_tensor.reshape(-1, 3)
        chunk = CHUNK if points.device.type == "cpu" else CHUNK_ACCELERATOR
        # made once a forward: a tensor built from Python numbers is a host-to-device copy on a GPU
        primes = torch.tensor(_PRIMES_INT32, dtype=torch.int32, device=points.device).view(3, 1, 1, 1)
        if torch.is_grad_enabled():
            return torch.cat([self._encode(part, primes) for part in points.split(chunk)]).view(*lead, -1)
        # without autograd each chunk is written straight into the output (no concatenation pass)
        width = self.num_levels * self.features_per_level
        out = torch.empty(points.shape[0], width, dtype=self.hash_table.dtype, device=points.device)
        for start in range(0, points.shape[0], chunk):
            self._encode(points[start : start + chunk], primes, out=out[start : start + chunk])
        return out.view(*lead, -1)

    def _encode(self, points: Tensor, primes: Tensor, out: Tensor | None = None) -> Tensor:
        # Layout [..., levels, points]: every broadcast below runs over a long contiguous inner dimension
        # (with the corners last, the inner loops were 2 long and the XOR alone cost a fifth of the forward).
        device = points.device
        n, levels = points.shape[0], self.num_levels
        scaled = points.T.contiguous()[:, None, :] * self.scalings.to(device).view(1, -1, 1)  # [3, L, N]
        floor = torch.floor(scaled)
        frac = (scaled - floor).view(3, 1, levels, n)
        # the cell's lower corner, hashed per axis (wrapping)
        low = floor.int().view(3, 1, levels, n) * primes
        corners = torch.cat([low, low + primes], dim=1)  # [3, 2, L, N]
        # [2, 2, 2, L, N]
        index = corners[0][:, None, None] ^ corners[1][None, :, None] ^ corners[2][None, None, :]
        offsets = self.hash_offset.to(device=device, dtype=torch.int32).view(levels, 1)
        index = ((index & (self.hash_table_size - 1)) + offsets).view(8, levels * n)  # int32
        weight = torch.cat([1 - frac, frac], dim=1)  # [3, 2, L, N]
        weights = weight[0][:, None, None] * weight[1][None, :, None] * weight[2][None, None, :]
        weights = weights.view(8, levels * n, 1)
        if torch.is_grad_enabled():
            features = _GatherRows.apply(self.hash_table, index)  # [8, L * N, F]: one gather, one backward
            weighted = (features * weights).sum(0)
        else:
            # without autograd each corner's rows are gathered, weighted and added in turn: buffers of one
            # corner, which stay in cache, instead of one of all eight weighted and then summed
            weighted = torch.zeros(
                levels * n, self.hash_table.shape[1], dtype=self.hash_table.dtype, device=device
            )
            for corner in range(8):
                weighted.add_(_GatherRows.apply(self.hash_table, index[corner]).mul_(weights[corner]))
        encoded = weighted.view(levels, n, -1).transpose(0, 1)  # [N, L, F]
        if out is None:
            return encoded.reshape(n, -1)
        out.view(n, levels, -1).copy_(encoded)
        return out
