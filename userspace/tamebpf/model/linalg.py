"""Tiny dense linear algebra for the fits (2 or 3 unknowns, a handful of rows).

Written out rather than pulling in numpy: the systems are at most 3x3, and a
pure-Python model keeps `tamebpf predict` importable anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from tamebpf.model._checks import ModelInputError


def solve(matrix: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float]:
    """Solve the square system matrix @ x = rhs (Gaussian elimination, partial pivoting)."""
    size = len(rhs)
    rows = [list(map(float, row)) + [float(r)] for row, r in zip(matrix, rhs, strict=True)]
    scale = max((abs(v) for row in rows for v in row[:size]), default=0.0)
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        # Relative singularity test: the probe levels make the system singular
        # only when they coincide, which callers reject first; this is a backstop.
        if abs(rows[pivot][col]) <= 1e-13 * scale:
            raise ModelInputError("probe levels give a singular system: use distinct levels")
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, size):
            factor = rows[r][col] / rows[col][col]
            for c in range(col, size + 1):
                rows[r][c] -= factor * rows[col][c]
    x = [0.0] * size
    for r in range(size - 1, -1, -1):
        acc = rows[r][size] - sum(rows[r][c] * x[c] for c in range(r + 1, size))
        x[r] = acc / rows[r][r]
    return x


def least_squares(design: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Coefficients minimising |design @ x - y|^2.

    With as many rows as unknowns this is the exact solution (the paper's
    two-probe Eq 13/14, or the three-probe full order 2 fit); with more rows it
    goes through the normal equations, after scaling each column to unit size
    so that n^2 (up to ~1e6) and 1 sit in the same range.
    """
    cols = len(design[0])
    if len(design) == cols:
        return solve(design, y)
    norms = [max(abs(row[c]) for row in design) or 1.0 for c in range(cols)]
    scaled = [[row[c] / norms[c] for c in range(cols)] for row in design]
    gram = [[sum(r[i] * r[j] for r in scaled) for j in range(cols)] for i in range(cols)]
    moment = [sum(r[i] * v for r, v in zip(scaled, y, strict=True)) for i in range(cols)]
    coef = solve(gram, moment)
    return [c / n for c, n in zip(coef, norms, strict=True)]
