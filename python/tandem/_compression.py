"""Gradient compression for tandem.torch's allreduce path, in Horovod's
shape (hvd.Compression.none / .fp16): a compressor is a class with two
static methods,

    compressed, ctx = C.compress(tensor)
    tensor = C.decompress(compressed, ctx)

and DistributedOptimizer(..., compression=C) reduces `compressed` instead
of the gradient. Floating-point gradients travel as float16 (fp16) or
bfloat16 (bf16), half the bytes of float32; other dtypes pass unchanged.
The reduction itself runs in the compressed dtype (each addition widened to
float32 and rounded back, as tandem reduces float16 and bfloat16), so the
result differs from the float32 reduction by the rounding of the inputs and
of every partial sum. docs/python.md "Compressed gradients".
"""

from __future__ import annotations

from typing import Optional

import torch

from tandem import _core

_FLOATING = (torch.float32, torch.float64)


class NoneCompressor:
    """No compression: the gradient itself travels."""

    name = "none"

    @staticmethod
    def compress(tensor: torch.Tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx) -> torch.Tensor:
        return tensor


class _CastCompressor:
    """Casts float32/float64 tensors to `wire_dtype`; decompress casts back
    to the original dtype."""

    name = ""
    wire_dtype = torch.float16

    @classmethod
    def compress(cls, tensor: torch.Tensor):
        if tensor.dtype not in _FLOATING:
            return tensor, None
        return tensor.to(cls.wire_dtype), tensor.dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx) -> torch.Tensor:
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """float16 on the wire (Horovod's Compression.fp16): 10 bits of mantissa,
    magnitudes up to 65504."""

    name = "fp16"
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """bfloat16 on the wire: float32's range, 7 bits of mantissa."""

    name = "bf16"
    wire_dtype = torch.bfloat16


class Compression:
    """The compressors by Horovod's attribute names, and by name for flags."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

    @staticmethod
    def by_name(name: str):
        """The compressor called `name` (none, fp16, bf16); InvalidArgument
        naming the known ones for any other."""
        for c in (NoneCompressor, FP16Compressor, BF16Compressor):
            if name == c.name:
                return c
        raise _core.InvalidArgument(
            f"unknown gradient compression '{name}': tandem.torch knows none, fp16, bf16, "
            "2bit, 1bit (and PowerSGD, as compression=tandem.torch.PowerSGD(rank=...))")


class _Quantized:
    """MXNet's gradient quantisation on the allreduce path
    (docs/gradient-compression.md for the formats): each rank quantises its
    float32 gradient plus its residual (error feedback, always on, as in
    MXNet), the ranks allgather the quantised words, and every rank expands
    each rank's words and sums them in rank order (MXNet's server sums the
    expanded pushes the same way), so the result is the same on every rank.
    Tensors of other dtypes travel whole. A rank receives (size - 1) times
    the quantised bytes: 16x (2bit) or 32x (1bit) fewer than float32 per
    rank, against the ring allreduce's 2 (size - 1) / size times the
    float32 bytes."""

    type = ""

    def __init__(self, threshold: float = 0.5):
        self.threshold = float(threshold)
        self.name = self.type
        self._core = _core.GradientQuantizer({"type": self.type,
                                              "threshold": repr(self.threshold)})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold!r})"

    def quantize(self, g: torch.Tensor, residual: Optional[torch.Tensor]) -> torch.Tensor:
        """g (+ residual, updated in place) as quantised words (uint8); no
        residual: g alone, nothing kept."""
        out = torch.empty(self._core.quantized_bytes(g.numel()), dtype=torch.uint8)
        self._core.quantize(g, torch.zeros_like(g) if residual is None else residual, out)
        return out

    def sum_into(self, g: torch.Tensor, gathered: torch.Tensor, average: bool) -> None:
        """g = the sum (or average) of every rank's expanded row of
        `gathered` (size x quantised bytes), in rank order."""
        self._core.dequantize(gathered[0], g)
        for row in gathered[1:]:
            self._core.dequantize_add(row, g)
        if average:
            g.div_(gathered.shape[0])


class TwoBit(_Quantized):
    """MXNet's 2bit: a value whose accumulation reaches +-threshold travels
    as +-threshold (the rest stays in the residual), others as 0; 16 values
    per 32-bit word."""

    type = "2bit"


class OneBit(_Quantized):
    """MXNet's 1bit: +1 where the accumulation is above threshold, else -1
    (the residual keeps the difference); 32 values per 32-bit word."""

    type = "1bit"


def resolve(compression):
    """A compressor from what a user passed: a name, or an object with
    compress and decompress; InvalidArgument otherwise."""
    if compression is None:
        return NoneCompressor
    if isinstance(compression, str):
        if compression in (TwoBit.type, OneBit.type):
            return TwoBit() if compression == TwoBit.type else OneBit()
        return Compression.by_name(compression)
    if isinstance(compression, _Quantized):
        return compression
    if callable(getattr(compression, "compress", None)) and \
            callable(getattr(compression, "decompress", None)):
        return compression
    raise _core.InvalidArgument(
        f"compression={compression!r}: expected a name (none, fp16, bf16, 2bit, 1bit) or a "
        "compressor "
        "with compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx)")


class PowerSGD:
    """PowerSGD (Vogels et al., 2019) as torch 1.13's powerSGD_hook defines
    it, per parameter: a gradient M (viewed as shape[0] x the rest) travels
    as two thin matrices, P = M Q (n x r) and Q = M^T P (m x r), instead of
    n x m values. Q is kept from the last step (warm start) and
    re-orthogonalised; P is summed over the ranks and orthogonalised
    (Householder QR in float64, where torch uses Gram-Schmidt or QR in the
    gradient's dtype), Q averaged, and every rank takes P Q^T, the average
    gradient projected on P's columns. With error feedback, what that
    projection lost is added to the parameter's next gradient on this rank.
    A tensor is compressed only when (n + m) * r * min_compression_rate <
    n * m (biases, small layers travel whole, averaged); the first
    start_iter steps are plain averaged allreduces. Each rank draws the
    first Q from a generator seeded with (seed, parameter index), so every
    rank starts from the same Q.

    Use: DistributedOptimizer(opt, ..., compression=PowerSGD(rank=2)).
    """

    name = "powersgd"

    def __init__(self, rank: int = 1, start_iter: int = 10, min_compression_rate: float = 2.0,
                 error_feedback: bool = True, warm_start: bool = True, seed: int = 0):
        if not isinstance(rank, int) or rank < 1:
            raise _core.InvalidArgument(f"PowerSGD: rank {rank!r} must be a positive integer")
        if not isinstance(start_iter, int) or start_iter < 0:
            raise _core.InvalidArgument(
                f"PowerSGD: start_iter {start_iter!r} must be a non-negative integer")
        if not min_compression_rate >= 0:
            raise _core.InvalidArgument(
                f"PowerSGD: min_compression_rate {min_compression_rate!r} must be >= 0")
        self.rank = rank
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = bool(error_feedback)
        self.warm_start = bool(warm_start)
        self.seed = int(seed)
        self.steps = 0  # synchronised steps so far (the same on every rank)
        self._q: dict[int, torch.Tensor] = {}
        self._errors: dict[int, torch.Tensor] = {}

    def rank_for(self, shape) -> int:
        """The rank a gradient of `shape` travels at; 0: it travels whole."""
        if len(shape) < 2:
            return 0
        n = int(shape[0])
        m = 1
        for d in shape[1:]:
            m *= int(d)
        r = min(n, m, self.rank)
        return r if (n + m) * r * self.min_compression_rate < n * m else 0

    def check(self, named) -> None:
        """InvalidArgument when no parameter of `named` ((name, tensor)
        pairs) would be compressed: the rank is larger than every tensor
        allows at min_compression_rate."""
        matrices = [(n, p) for n, p in named if p.dim() >= 2]
        if any(self.rank_for(p.shape) for _, p in matrices):
            return
        if not matrices:
            raise _core.InvalidArgument("PowerSGD: the model has no parameter of two or more "
                                        "dimensions to compress")
        name, p = max(matrices, key=lambda np_: np_[1].numel())
        n, m = p.shape[0], p.numel() // p.shape[0]
        best = 0
        for r in range(1, min(n, m) + 1):
            if (n + m) * r * self.min_compression_rate < n * m:
                best = r
        allows = (f"needs rank <= {best}" if best else
                  "is too small for any rank")
        raise _core.InvalidArgument(
            f"PowerSGD rank {self.rank}: no parameter is worth compressing at "
            f"min_compression_rate {self.min_compression_rate:g}; the largest, '{name}' "
            f"{list(p.shape)}, {allows}")

    @staticmethod
    def _orthogonalize(a: torch.Tensor) -> torch.Tensor:
        """Replaces the columns of `a` by an orthonormal basis of a space that
        holds them (Householder QR in float64), in place. Gradient matrices
        are often ill-conditioned or rank-deficient (a classifier's last
        layer has rank classes - 1): there Gram-Schmidt in float32 leaves
        columns far from orthonormal, and P P^T is then no projection."""
        a.copy_(torch.linalg.qr(a.double(), mode="reduced").Q)
        return a

    def begin(self, i: int, g: torch.Tensor, feedback: bool):
        """The first half for parameter i's gradient g (rank_for(g.shape) >
        0): returns (M, P, Q) with P = M Q to be summed over the ranks."""
        r = self.rank_for(g.shape)
        m = g.view(g.shape[0], -1)
        if feedback and self.error_feedback:
            # M + error, in the error's buffer (no new 16 MB per step for a
            # 2048 x 2048 layer: fresh large tensors cost page faults).
            error = self._errors.pop(i, None)
            m = m.clone() if error is None else error.add_(m)
        q = self._q.get(i) if self.warm_start else None
        if q is None:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
            q = torch.randn(m.shape[1], r, generator=gen, dtype=m.dtype)
        self._orthogonalize(q)
        return m, m @ q, q

    def middle(self, m: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """After P was summed: orthogonalises it (in place) and returns
        M^T P, to be averaged over the ranks."""
        self._orthogonalize(p)
        # (P^T M)^T reads M row by row: 5x faster than M^T P with the
        # generic BLAS of Debian's torch (a 2048 x 2048 M: 9 vs 44 ms).
        return (p.t() @ m).t().contiguous()

    def end(self, i: int, g: torch.Tensor, m: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
            feedback: bool) -> None:
        """After Q was averaged: g = P Q^T; keeps Q (warm start) and the
        error (M - P Q^T, in M's buffer when it is the rank's own)."""
        # P Q^T straight into the gradient; Q^T contiguous: 8.5 vs 15 ms for
        # 2048 x 2048 with the generic BLAS.
        approx = g.view(g.shape[0], -1)
        torch.mm(p, q.t().contiguous(), out=approx)
        if feedback and self.error_feedback:
            self._errors[i] = m.sub_(approx)  # m is this rank's own buffer here
        self._q[i] = q
