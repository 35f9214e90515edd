"""What the Python workers of tests/system/test_python_*.py share: tensors of
either kind (NumPy or torch) from NumPy values, exact comparison, expected
errors, and the closing line the tests look for."""

from __future__ import annotations

import sys

import numpy as np


class Checker:
    """Counts checks; the first wrong value prints expected and got and
    exits 1 (the test then shows the job's output)."""

    def __init__(self, kind: str, label: str):
        self.kind = kind
        self.label = label
        self.count = 0
        if kind == "torch":
            import torch
            self.torch = torch

    def tensor(self, values) -> object:
        """A fresh contiguous tensor of this worker's kind holding `values`."""
        a = np.ascontiguousarray(values)
        if self.kind == "torch":
            return self.torch.from_numpy(a.copy())
        return a.copy()

    def zeros(self, shape, dtype) -> object:
        return self.tensor(np.zeros(shape, dtype=dtype))

    def numpy(self, t) -> np.ndarray:
        if self.kind == "torch" and isinstance(t, self.torch.Tensor):
            if t.dtype == self.torch.bfloat16:
                return t.float().numpy()
            return t.numpy()
        return np.asarray(t)

    def equal(self, what: str, got, expected) -> None:
        self.count += 1
        g = self.numpy(got)
        e = np.asarray(expected)
        if g.shape != e.shape or not np.array_equal(g.astype(np.float64), e.astype(np.float64)):
            print(f"{self.label}: WRONG {what}: expected {e.tolist()} got {g.tolist()}",
                  file=sys.stderr, flush=True)
            sys.exit(1)

    def raises(self, what: str, exc_type, needle: str, call) -> None:
        """call() must raise exc_type with `needle` in its message."""
        self.count += 1
        try:
            call()
        except exc_type as e:
            if needle not in str(e):
                print(f"{self.label}: WRONG {what}: message lacks {needle!r}: {e}",
                      file=sys.stderr, flush=True)
                sys.exit(1)
            print(f"{self.label}: error {what}: {type(e).__name__}: {e}", flush=True)
            return
        except Exception as e:  # the wrong class
            print(f"{self.label}: WRONG {what}: raised {type(e).__module__}.{type(e).__name__}"
                  f" ({e}), expected {exc_type.__name__}", file=sys.stderr, flush=True)
            sys.exit(1)
        print(f"{self.label}: WRONG {what}: no error (expected {exc_type.__name__})",
              file=sys.stderr, flush=True)
        sys.exit(1)

    def done(self, rank: int, size: int) -> None:
        print(f"{self.label}: ok kind={self.kind} rank={rank} size={size} checks={self.count}",
              flush=True)
