"""What a graft did, in words: one ``OutputCheck`` per model output and the ``GraftReport``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class OutputCheck:
    """One model output: the largest ``|grafted - reference|`` and the tolerance it is held to."""

    name: str
    max_abs_err: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return bool(self.max_abs_err <= self.tolerance)

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "MISMATCH"
        return (f"{self.name}: max abs err {self.max_abs_err:.3g} (tolerance "
                f"{self.tolerance:.3g}) {verdict}")



@dataclass
class GraftReport:
    """What ``graft`` did; truthy unless the equivalence check failed. ``str`` is the report."""

    artifact: str  # what was grafted, in words
    at: str
    positions: str
    prefix: str
    removed_nodes: int
    removed_bytes: int
    pe_bytes: int
    bytes_before: int
    bytes_after: int
    metadata_bytes: int
    converted: str | None = None  # "opset 18 -> 19" when the model itself was converted
    lengths: list[int] = field(default_factory=list)
    checks: list[OutputCheck] | None = None
    out: Path | None = None
    model: Any = field(default=None, repr=False)  # the grafted onnx.ModelProto
    found: str | None = None  # what graft found in the model, when no PE was given
    max_len_from: str | None = None  # where max_len came from, when --max-len was not given

    def __bool__(self) -> bool:
        return self.checks is None or all(c.passed for c in self.checks)

    @property
    def saved(self) -> int:
        return self.bytes_before - self.bytes_after

    def lines(self) -> list[str]:
        share = self.pe_bytes / self.bytes_after if self.bytes_after else 0.0
        lines = [self.found] if self.found else []
        lines += [
            f"grafted {self.artifact} at {self.at!r} (positions {self.positions}, names "
            f"prefixed {self.prefix})",
            f"removed {self.removed_nodes} nodes and their initializers ({self.removed_bytes:,} B);"
            f" the PE adds {self.pe_bytes:,} B and its manifest {self.metadata_bytes:,} B "
            "(metadata_props)",
            f"bytes: {self.bytes_before:,} -> {self.bytes_after:,} ({-self.saved:+,} B, "
            f"{-self.saved / max(self.bytes_before, 1):+.1%}); the PE is {share:.1%} of the "
            "grafted model",
        ]
        if self.max_len_from:
            lines.append(f"positions covered: {self.max_len_from}")
        if self.converted:
            lines.append(f"the model was converted {self.converted} by onnx's version converter "
                         "(the PE's ops do not exist at the model's opset)")
        if self.checks is None:
            lines.append("equivalence not checked (--no-check)")
        else:
            lines.append(
                f"equivalence on onnxruntime CPU at sequence lengths "
                f"{', '.join(map(str, self.lengths))}:"
            )
            lines += [f"  {check}" for check in self.checks]
        if self.out is not None:
            lines.append(f"wrote {self.out}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())
