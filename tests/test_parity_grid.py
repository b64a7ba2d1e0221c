"""The parity grid: every scheme x mode x format x dtype/quantisation (x lowering for the bit
family's compute graphs) x runtime available here.

Each cell exports one artifact (cached per module: the ``cpu`` and ``ref`` cells of a graph share
it), verifies it with ``edgepe.verify`` on one runtime over every position ``0 .. max_len - 1``
plus the extrapolation probe, and checks the cell's explicit tolerance:

- ``exact`` (0): integer and bit outputs (exact schemes, uint8 and bit-packed dtypes), and float
  schemes whose spec says bitwise (their manifest tolerance is (0, 0));
- ``spec``: the scheme's float tolerance (``spec.tolerance``);
- ``spec+fp16``: float16 outputs of a scheme with a non-zero tolerance also allow one float16
  step (rounding both sides to float16 can split values that were within it);
- ``quant.bound``: int8 artifacts, the proven bound from the manifest.

The grid is built from the registry and the combinations the contract allows (DESIGN.md and the
exporters' documented refusals), not from what the exporters happen to accept: a combination
that should exist and does not export fails its cell. Ids read like ``gray-compute-uint8-cpu``
(ONNX) or ``gray-table-npy-bit-file``. The default grid uses ``max_len`` 37 (and 1 for float32
graphs on the CPU); ``-m slow`` adds 1, 64 and 1000 everywhere and a width that is not a multiple
of 8.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from _table_oracle import expected_table, int8_expectations
from test_tables import read_without_edgepe

from edgepe.export import ExportConfig, export
from edgepe.graphs import COMPUTE
from edgepe.schemes import build, get_spec, n_bits, resolve, scheme_ids
from edgepe.verify import verify_artifact
from edgepe.verify.c_runner import run_c_header

# --format c --mode compute: issue 4 asks it for the bit family and the demo scheme; these are
# the schemes the C exporter documents (edgepe/formats/c.py, COMPUTE_SCHEMES).
C_COMPUTE = ("binary", "binary-bits", "binary-signed", "binary-smooth", "gray",
             "binary-multilevel", "binary-2d", "hierarchical", "hybrid-int-binary",
             "binary-gated", "fourier-binary", "sinusoidal", "rope", "alibi")
RUNTIMES = {"onnx": ("cpu", "ref"), "npy": ("file",), "bin": ("file",), "c": ("c",),
            "tflite": ("litert", "tflm")}
# .tflite (issue 43): compute graphs of these bit schemes and binary's sliced one (the float
# lowering runs on TFLM too, RIGHT_SHIFT on LiteRT only), rope's and sinusoidal's sliced (float
# slicing), the integer family's compute (CAST,
# DIV, MUL), tables of every [N]-position scheme
# (rope's cos/sin rows, bias tables by distance).
TFLITE_COMPUTE = ("binary", "binary-bits", "binary-signed", "gray", "binary-multilevel",
                  "hybrid-int-binary", "binary-smooth", "fourier-binary", "binary-gated")
# int8 compute: the FULLY_CONNECTED projections, binary-gated's quantised output (issue 43)
TFLITE_INT8_COMPUTE = ("binary", "fourier-binary", "binary-gated")
# scheme -> graph family (the foundation's builder map): the "bits" family has --lowering arith.
BIT_FAMILY = {scheme: family for scheme, (family, _) in COMPUTE.items()}


@functools.cache
def zero_one(scheme: str) -> bool:
    """Whether the scheme's values are exactly 0 or 1 (so uint8 and bit-packing are lossless)."""
    config = resolve(scheme, 37)
    return bool(np.isin(expected_table(config, build(config)), (0.0, 1.0)).all())


@dataclass(frozen=True)
class Cell:
    scheme: str
    mode: str
    format: str
    dtype: str
    quantize: str
    runtime: str
    max_len: int = 37
    d_model: int | None = None
    graph: str = ""  # rope: "apply" or "apply-ort" (the apply graphs); "" the encoding itself
    lowering: str = "bitwise"  # bit family: "arith" has no bitwise ops (for the CUDA provider)

    @property
    def tolerance(self) -> str:
        """The explicit tolerance of this cell (module docstring)."""
        spec = get_spec(self.scheme)
        if self.quantize == "int8":
            return "quant.bound"
        if self.mode == "sliced" and self.scheme in ("rope", "sinusoidal"):
            # against the float64 definition, graphs.sliced.tolerance (in the manifest)
            return "sliced+fp16" if self.dtype == "float16" else "sliced"
        if spec.exact or self.dtype in ("uint8", "bit") or spec.tolerance == (0.0, 0.0):
            return "exact"
        return "spec+fp16" if self.dtype == "float16" else "spec"

    @property
    def id(self) -> str:
        parts = [self.scheme, self.mode]
        if self.graph:
            parts.append(self.graph)
        if self.lowering != "bitwise":
            parts.append(self.lowering)
        if self.format != "onnx":
            parts.append(self.format)
        parts.append("int8" if self.quantize == "int8" else self.dtype)
        if self.max_len != 37:
            parts.append(f"L{self.max_len}")
        if self.d_model is not None:
            parts.append(f"d{self.d_model}")
        return "-".join([*parts, self.runtime])


def variants(scheme: str, mode: str) -> list[tuple[str, str, str, str, str]]:
    """``(format, dtype, quantize, graph, lowering)`` the contract allows for ``scheme`` in
    ``mode``."""
    return [v if len(v) == 5 else (*v, "bitwise") for v in _variants(scheme, mode)]


def _variants(scheme: str, mode: str) -> list[tuple]:
    if mode == "sliced":  # issue 34: graphs (int8 for the trig schemes), C rows (binary: int8 too)
        trig = scheme in ("rope", "sinusoidal")
        out = [("onnx", "float32", "none", ""), ("onnx", "float16", "none", ""),
               ("c", "float32", "none", "")]
        out.append(("onnx", "float32", "int8", "") if trig else ("c", "float32", "int8", ""))
        if scheme == "rope":
            out += [("onnx", "float32", "none", "apply"), ("onnx", "float32", "none", "apply-ort")]
        return out + _tflite_variants(scheme, mode, get_spec(scheme))
    spec = get_spec(scheme)
    bits = zero_one(scheme)
    out = [("onnx", "float32", "none", ""), ("onnx", "float16", "none", "")]
    if bits:
        out.append(("onnx", "uint8", "none", ""))
    if not spec.exact:  # int8 of an exact scheme is refused: it would only add error (issue 5)
        out.append(("onnx", "float32", "int8", ""))
    if mode == "compute" and BIT_FAMILY.get(scheme) == "bits":  # --lowering arith (issue 3)
        out.append(("onnx", "float32", "none", "", "arith"))
        if bits:
            out.append(("onnx", "uint8", "none", "", "arith"))
    out += _tflite_variants(scheme, mode, spec)
    if mode == "table":
        for fmt in ("npy", "bin", "c"):
            dtypes = ["float32"] + (["float16"] if fmt != "c" else [])  # C99 has no half
            dtypes += ["uint8", "bit"] if bits else []
            out += [(fmt, d, "none", "") for d in dtypes]
            if not spec.exact:
                out.append((fmt, "float32", "int8", ""))
    else:
        if scheme in C_COMPUTE:
            out.append(("c", "float32", "none", ""))
        if scheme == "binary":  # int8 weights in the C compute function
            out.append(("c", "float32", "int8", ""))
        if scheme == "rope":
            out += [("onnx", "float32", "none", "apply"), ("onnx", "float32", "none", "apply-ort")]
    return out


def _tflite_variants(scheme: str, mode: str, spec) -> list[tuple]:
    if mode == "sliced" and scheme == "binary" or mode == "compute" and scheme in TFLITE_COMPUTE:
        out = [("tflite", "float32", "none", "", lowering) for lowering in ("bitwise", "float")]
        if scheme in TFLITE_INT8_COMPUTE and (scheme == "binary" or mode == "compute"):
            out += [("tflite", "float32", "int8", "", lowering) for lowering in ("bitwise",
                                                                                 "float")]
        return out
    if mode == "compute" and scheme.startswith("integer"):  # CAST, DIV, MUL: no lowering
        return [("tflite", "float32", "none", "")]
    if mode == "sliced" and scheme in ("rope", "sinusoidal"):  # float slicing only
        return [("tflite", "float32", quant, "", "float") for quant in ("none", "int8")]
    if mode == "table" and spec.arity is None:
        return [("tflite", "float32", "none", "")] + (
            [] if spec.exact else [("tflite", "float32", "int8", "")])
    return []


def grid(lengths=(37,), widths=(None,)) -> list[Cell]:
    cells = []
    for scheme in scheme_ids():
        spec = get_spec(scheme)
        for max_len in lengths:
            for d_model in widths:
                if d_model is not None and (spec.d_model is None or callable(spec.d_model)
                                            or (spec.even_d_model and d_model % 2)):
                    continue  # only schemes with a free width take another one
                for mode in spec.modes:
                    for fmt, dtype, quantize, graph, lowering in variants(scheme, mode):
                        for runtime in RUNTIMES[fmt]:
                            if graph == "apply-ort" and runtime == "ref":
                                continue  # com.microsoft ops: onnxruntime only
                            if runtime == "tflm" and mode != "table" and lowering == "bitwise":
                                continue  # TFLM's resolver has no RIGHT_SHIFT
                            cells.append(Cell(scheme, mode, fmt, dtype, quantize, runtime,
                                              max_len, d_model, graph, lowering))
    return cells


# The default grid: every combination at max_len 37, plus the max_len = 1 edge (one row, one
# bit) for each scheme and mode in float32 on onnxruntime CPU.
CELLS = grid() + [c for c in grid(lengths=(1,)) if c.format == "onnx" and c.runtime == "cpu"
                  and c.dtype == "float32" and c.quantize == "none"]
SLOW_CELLS = [c for c in grid(lengths=(1, 64, 1000)) + grid(widths=(13,)) if c not in CELLS]
EXTENSION = {"onnx": ".onnx", "npy": ".npy", "bin": ".bin", "c": ".h", "tflite": ".tflite"}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Export each artifact once for all its runtimes."""
    folder = tmp_path_factory.mktemp("grid")
    made: dict = {}

    def get(cell: Cell):
        key = (cell.scheme, cell.mode, cell.format, cell.dtype, cell.quantize, cell.max_len,
               cell.d_model, cell.graph, cell.lowering)
        if key not in made:
            extra = {}
            if cell.graph:
                extra["rope_graph"] = "apply"
                if cell.graph == "apply-ort":
                    extra["rope_lowering"] = "ort"
            config = resolve(cell.scheme, cell.max_len, d_model=cell.d_model)
            name = "-".join(str(k) for k in key if k not in (None, "")) + EXTENSION[cell.format]
            made[key] = export(ExportConfig(
                scheme=config, mode=cell.mode, format=cell.format, dtype=cell.dtype,
                quantize=cell.quantize, lowering=cell.lowering, out=folder / name,
                extra=extra)).path
        return made[key]

    return get


def check_cell(cell: Cell, path) -> None:
    if cell.format == "tflite":
        pytest.importorskip({"litert": "ai_edge_litert", "tflm": "tflite_micro"}[cell.runtime],
                            reason="the [tflite] extra is not installed")
    report = verify_artifact(path, providers=[cell.runtime])
    assert report.sha256_ok
    result = report.results[0]
    assert result.runtime == cell.runtime
    spec = get_spec(cell.scheme)
    tol = result.tolerance
    if cell.tolerance == "exact":
        assert tol.exact, f"{cell.id}: expected an exact comparison, the verifier used {tol}"
    elif cell.tolerance == "quant.bound":
        assert (tol.rtol, tol.atol) == (0.0, report.manifest["quant"]["bound"])
    elif cell.tolerance.startswith("sliced"):
        from edgepe.graphs.sliced import tolerance

        plan = report.manifest["sliced"]["slices"]
        assert tol.rtol == 0.0 and tol.atol == tolerance(plan, 1.0, cell.graph != "")
        assert tol.fp16_ulps == (1 if cell.tolerance == "sliced+fp16" else 0)
        assert report.reference_distance is not None
    else:
        assert (tol.rtol, tol.atol) == spec.tolerance
        assert tol.fp16_ulps == (1 if cell.tolerance == "spec+fp16" else 0)
    assert result, f"{cell.id}: {result}"
    if cell.format in ("npy", "bin") or (cell.format == "c" and cell.mode == "table"):
        assert result.positions == report.manifest["shape"][0]  # every row of the table
    else:  # every in-range position (bias: query x key pair), and the probe beyond them
        assert result.positions > cell.max_len
    if cell.tolerance == "exact":
        assert result.max_abs_err == 0.0
    if cell.mode == "table" and cell.format not in ("onnx", "tflite"):  # (graphs: by position)
        check_table_file(cell, path, report.manifest)


def check_table_file(cell: Cell, path, manifest) -> None:
    """The file's table, read without the verifier (NumPy and the manifest, or the C program),
    against ``encode`` at the documented rows (tests/_table_oracle.py): the verifier compares a
    table with the rows the exporter wrote, so this is the check that catches a shifted row."""
    config = resolve(cell.scheme, cell.max_len, d_model=cell.d_model)
    expected = expected_table(config, build(config))
    if cell.format == "c":
        table = q = run_c_header(path, manifest, np.arange(expected.shape[0]))  # int8: raw q
    else:
        table, _ = read_without_edgepe(path)
        if cell.quantize == "int8":
            q = np.load(path) if cell.format == "npy" else np.fromfile(path, np.int8)
    if cell.quantize == "int8":
        int8_expectations(expected, q.reshape(expected.shape), manifest["quant"]["scale"])
    elif cell.dtype == "float16":
        np.testing.assert_array_equal(table, expected.astype(np.float16))
    else:
        np.testing.assert_array_equal(table, expected)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_parity(cell: Cell, artifacts) -> None:
    check_cell(cell, artifacts(cell))


@pytest.mark.slow
@pytest.mark.parametrize("cell", SLOW_CELLS, ids=lambda c: c.id)
def test_parity_exhaustive(cell: Cell, artifacts) -> None:
    check_cell(cell, artifacts(cell))


def test_the_grid_covers_every_scheme_mode_and_runtime() -> None:
    """Completeness: a scheme or mode added to the registry joins the grid by itself."""
    covered = {(c.scheme, c.mode) for c in CELLS}
    assert covered == {(s, m) for s in scheme_ids() for m in get_spec(s).modes}
    assert {c.runtime for c in CELLS} == {"cpu", "ref", "file", "c", "litert", "tflm"}
    assert all(c.tolerance == "exact" for c in CELLS if c.dtype in ("uint8", "bit"))
    assert len({c.id for c in CELLS}) == len(CELLS)
    assert n_bits(37) == 6  # the default max_len keeps every bit scheme small
