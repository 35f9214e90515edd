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
            f"unknown gradient compression '{name}': tandem.torch knows none, fp16, bf16")


def resolve(compression):
    """A compressor from what a user passed: a name, or an object with
    compress and decompress; InvalidArgument otherwise."""
    if compression is None:
        return NoneCompressor
    if isinstance(compression, str):
        return Compression.by_name(compression)
    if callable(getattr(compression, "compress", None)) and \
            callable(getattr(compression, "decompress", None)):
        return compression
    raise _core.InvalidArgument(
        f"compression={compression!r}: expected a name (none, fp16, bf16) or a compressor "
        "with compress(tensor) -> (tensor, ctx) and decompress(tensor, ctx)")
