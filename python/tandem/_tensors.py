"""Allocating outputs like an input, for NumPy arrays and torch tensors
alike, without importing torch unless the caller uses it."""

from __future__ import annotations


def is_torch(x) -> bool:
    """True for a torch.Tensor (or subclass, e.g. nn.Parameter)."""
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(x).__mro__)


def shape_of(x) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def empty_like(x, shape) -> object:
    """An uninitialised tensor of x's kind and dtype with `shape`."""
    if is_torch(x):
        import torch
        return torch.empty(tuple(shape), dtype=x.dtype)
    import numpy
    return numpy.empty(tuple(shape), dtype=x.dtype)


def copy_of(x) -> object:
    """A contiguous copy of x (same kind and dtype)."""
    if is_torch(x):
        return x.detach().clone(memory_format=__import__("torch").contiguous_format)
    import numpy
    return numpy.array(x, copy=True, order="C")


def zeros(shape, dtype) -> object:
    import numpy
    return numpy.zeros(tuple(shape), dtype=dtype)
