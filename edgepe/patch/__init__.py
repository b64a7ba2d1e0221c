"""Make a PyTorch transformers model's PE edge-ready in place, proven (issue 42).

    import edgepe
    report = edgepe.patch(model)                 # mode="table", max_len = max_position_embeddings
    print(report)                                # one line per PE module, then the logits proof
    torch.onnx.export(model, ...)                # any exporter now takes a trig-free PE

``graft`` works on an ONNX file; ``patch`` works one step earlier, on the ``nn.Module``, so the
swap is independent of the exporter (torch.onnx, ExecuTorch, litert-torch: ``edgepe.patch.
export``). What happens:

- ``find`` classifies every module by its attributes (``edgepe.patch.find``): rotary embeddings
  are replaced; learned and sinusoidal position tables (already a gather, no trig at run time)
  and ALiBi (computed in the model's forward with ``arange``/``pow``/``cumsum``, no module) are
  kept and said so; what edgepe cannot reproduce is refused naming its class (``Refused``, an
  ``EdgepeError``), before anything changes.
- Each rotary module is replaced by a ``RotaryTable`` (``mode="table"``, the default: the
  original's own cos/sin at positions ``0 .. L - 1``, gathered) or a ``RotarySliced``
  (``mode="sliced"``: angle addition over bit-slice tables, a few hundred rows): no Sin or Cos
  either way (``edgepe.patch.modules``), the same ``(cos, sin)`` shapes, dtype and attention
  factor; positions past ``L - 1`` read row ``L - 1``.
- Proofs (``edgepe.patch.prove``): each replacement against its original at every position
  ``0 .. L - 1`` within the mode's bound (table 0); then the patched model's logits against the
  original's on a batch, left padding, a KV cache and an offset (table: exact; sliced:
  ``LOGITS_SLICED``). A failed proof puts the original modules back and raises ``ParityError``.

``quantize``: ``"none"`` only for now (int8 tables are an edgepe export option; here they would
change the model's logits, which the proof then could not hold exact): anything else is refused.
The bit family has no transformers model to patch; its integer compute graph stays an
``edgepe export`` artifact.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import torch

from edgepe.contract.errors import BadParameterError, ParityError
from edgepe.patch.build import MODES, build
from edgepe.patch.find import Found, Refused, find
from edgepe.patch.prove import (
    LOGITS_SLICED,
    cases,
    max_diff,
    module_bound,
    prove_module,
    run_cases,
)

QUANTIZE = ("none",)
__all__ = ["MODES", "Found", "PatchReport", "Refused", "find", "patch"]


@dataclass
class Replaced:
    """One PE module and what ``patch`` did with it (``replacement`` ``None``: kept)."""

    found: Found
    replacement: torch.nn.Module | None
    detail: str
    max_abs_err: float = 0.0
    bound: float = 0.0

    def __str__(self) -> str:
        if self.replacement is None:
            return f"{self.found.name}: {self.found.cls} ({self.detail}) -> kept"
        return (f"{self.found.name}: {self.found.cls} ({self.detail}) -> "
                f"{type(self.replacement).__name__}, max |diff| {self.max_abs_err:.3g} <= "
                f"bound {self.bound:.3g}")


@dataclass
class PatchReport:
    """What ``patch`` did; truthy when every proof held. ``str``: one line per module, then
    the logits proof."""

    mode: str
    max_len: int
    modules: list[Replaced] = field(default_factory=list)
    cases: list[str] = field(default_factory=list)
    logits_err: float = 0.0
    logits_tolerance: float = 0.0
    model: torch.nn.Module | None = field(default=None, repr=False)

    @property
    def replaced(self) -> list[Replaced]:
        return [m for m in self.modules if m.replacement is not None]

    @property
    def passed(self) -> bool:
        return all(m.max_abs_err <= m.bound for m in self.replaced) and (
            self.logits_err <= self.logits_tolerance)

    def __bool__(self) -> bool:
        return self.passed

    def swap(self, original: bool) -> None:
        """Put the original modules back (``True``) or the replacements (``False``). T5's
        bias: the replacement goes into the attention's instance ``__dict__`` as
        ``compute_bias``, where it shadows the class's method (a registered submodule would
        not: ``nn.Module.__getattr__`` is asked only when the method is not found); popped to
        put the original back."""
        for m in self.replaced:
            if m.found.kind == "t5-bias":
                if original:
                    m.found.module.__dict__.pop("compute_bias", None)
                else:
                    m.found.module.__dict__["compute_bias"] = m.replacement
                continue
            _set(self.model, m.found.name, m.found.module if original else m.replacement)

    def __str__(self) -> str:
        lines = [str(m) for m in self.modules]
        if self.cases:
            lines.append(f"logits: {len(self.cases)} inputs ({', '.join(self.cases)}): max "
                         f"|diff| {self.logits_err:.3g} <= {self.logits_tolerance:.3g}")
        elif self.replaced:
            lines.append("logits: not checked")
        return "\n".join(lines)


def _set(model, name: str, module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def _detail(found: Found, mode: str, max_len: int) -> str:
    m = found.module
    if found.kind == "rotary":
        kinds = sorted({str(v) for v in found.rope_types.values()})
        types = "" if found.layer_types == (None,) else f", layer types {list(found.layer_types)}"
        mrope = f", mrope_section {list(found.mrope)}" if found.mrope else ""
        return f"rotary {'/'.join(kinds)}{types}{mrope}, {mode} L={max_len}"
    if found.kind == "axial":
        return ("a vision tower's axial 2D rotary: runs with pixel_values only, its Sin/Cos "
                "not replaced; a text-only export has none")
    if found.kind == "t5-bias":
        direction = "causal" if m.is_decoder else "bidirectional"
        return (f"T5 bias {direction}, {m.relative_attention_num_buckets} buckets, max_distance "
                f"{m.relative_attention_max_distance}: log buckets -> integer lookup, distances "
                f"to {max_len - 1}")
    if found.kind == "alibi":
        method = next(n for n in ("build_alibi_tensor", "build_mpt_alibi_tensor")
                      if callable(getattr(m, n, None)))
        return f"ALiBi from its {method}: arange and pow, no trig, no module to swap"
    offset = getattr(m, "offset", 0)
    where = f", offset {offset}" if offset else ""
    return f"{found.kind} table {list(found.table)}{where}: a gather, no trig"


def default_max_len(model, found: list[Found] = ()) -> int:
    """The config's ``max_position_embeddings``; a model with T5's bias alone (no position
    range): 4 x its largest ``max_distance`` (512 for T5), the distances its proof covers."""
    config = getattr(model, "config", None)
    if hasattr(config, "get_text_config"):  # a multimodal model's text side (Qwen2-VL)
        config = config.get_text_config()
    value = getattr(config, "max_position_embeddings", None)
    t5 = [f.module.relative_attention_max_distance for f in found if f.kind == "t5-bias"]
    if t5 and not any(f.kind == "rotary" for f in found):
        return 4 * max(t5)
    if not isinstance(value, int) or value < 1:
        raise BadParameterError(f"{type(model).__name__}: its config has no "
                                "max_position_embeddings; give max_len")
    return value


def patch(model, mode: str = "table", max_len: int | None = None, quantize: str = "none",
          check: bool = True) -> PatchReport:
    """Replace ``model``'s rotary modules in place by trig-free edgepe ones, proven (module
    docstring). Returns the ``PatchReport`` (truthy); raises ``Refused`` (nothing changed) for a
    PE it cannot reproduce or a model with none, ``BadParameterError`` for a bad option,
    ``ParityError`` (the originals put back) when a proof fails."""
    if mode not in MODES:
        raise BadParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if quantize not in QUANTIZE:
        raise BadParameterError(f"quantize must be one of {', '.join(QUANTIZE)}, got "
                                f"{quantize!r} (int8 tables would change the logits)")
    if not isinstance(model, torch.nn.Module):
        raise BadParameterError(f"patch takes a torch.nn.Module, got {type(model).__name__}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        raise BadParameterError(f"max_len must be a positive integer, got {max_len!r}")
    found = find(model)  # raises Refused before anything changes
    rotary = [f for f in found if f.kind in ("rotary", "t5-bias")]
    if max_len is None:
        max_len = default_max_len(model, found) if rotary else 0
    report = PatchReport(mode, max_len, model=model)
    inputs = cases(model, max_len, mrope=any(f.mrope for f in found)) \
        if check and rotary else []
    reference = run_cases(model, inputs) if inputs else []
    for f in found:
        if f.kind not in ("rotary", "t5-bias"):
            report.modules.append(Replaced(f, None, _detail(f, mode, max_len)))
            continue
        new = build(f, mode, max_len)
        item = Replaced(f, new, _detail(f, mode, max_len), bound=module_bound(f, mode, max_len))
        item.max_abs_err = prove_module(f, new, max_len)
        if not item.max_abs_err <= item.bound:
            raise Refused(f"cannot patch {f.cls} ({f.name}): edgepe cannot reproduce it: "
                          f"its {mode} replacement is {item.max_abs_err:.3g} off at some "
                          f"position below {max_len} (bound {item.bound:.3g})")
        report.modules.append(item)
    report.swap(original=False)
    if inputs:
        report.cases = [name for name, _ in inputs]
        # exact when every replacement is (table mode; T5's integer buckets in either mode)
        report.logits_tolerance = 0.0 if all(m.bound == 0 for m in report.replaced) \
            else LOGITS_SLICED
        report.logits_err = max_diff(reference, run_cases(model, inputs))
        if not report.passed:
            report.swap(original=True)
            raise ParityError(f"the patched model's logits are {report.logits_err:.3g} off the "
                              f"original's (tolerance {report.logits_tolerance:.3g}); the "
                              "original modules are back")
    return report


class _CallableModule(types.ModuleType):
    """``edgepe.patch(model, ...)`` once this package is imported: importing a submodule binds
    the package over the root's lazy ``edgepe.patch`` function (Python sets the parent's
    attribute after the import), so the package itself calls ``patch``. The root stays light:
    it imports no torch until the first call."""

    def __call__(self, model, mode: str = "table", max_len: int | None = None,
                 quantize: str = "none", check: bool = True) -> PatchReport:
        return patch(model, mode=mode, max_len=max_len, quantize=quantize, check=check)


sys.modules[__name__].__class__ = _CallableModule
