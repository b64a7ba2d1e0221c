"""Bias tables (alibi, gaussian, t5-bias) are indexed by the distance ``t - u`` (issue 16).

A decoder at position ``10^4`` with its keys in the last 64 positions reads, from a table of
``max_len`` 64, exactly what the compute graph gives: on the ONNX table graph, npy, bin, the C
header (through its ``_row`` function) and ``edgepe.load``. Distances past the table clamp to
``+-(L - 1)``, the same in every format, int8 ones included; positions saturate at ``+-2^61``.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import edgepe
from edgepe import api
from edgepe.graphs.table_values import BIAS_SATURATION, bias_rows
from edgepe.verify.c_runner import COMPILE_FLAGS, compiler

L = 64
QUERIES = np.arange(10**4, 10**4 + 9, dtype=np.int64)  # a decode step's positions
KEYS = np.arange(10**4 + 9 - L, 10**4 + 9, dtype=np.int64)  # the last 64 positions
# Far pairs inside the positions the artifacts' manifests accept (|pos| <= 2^24, the compute
# schemes' float32 limit, which edgepe.load enforces), and int64's extremes for the raw readers.
LIMIT = 2**24
FAR_QUERIES = np.array([0, 5, 10**4, LIMIT, -LIMIT, LIMIT - 30], dtype=np.int64)
FAR_KEYS = np.array([0, 63, 64, 9000, -5, LIMIT, -LIMIT, LIMIT - 1], dtype=np.int64)
EXTREMES = np.array([0, 2**40, 2**61 - 1, 2**61 + 9, 2**62, -(2**63), 2**63 - 1], dtype=np.int64)
# t5-bias: max_distance 40 < L - 1, so the clamp of a table and the compute graph's own
# saturation agree past the table too
CASES = [("alibi", 12, {}), ("gaussian", 2, {"sigma": 3.0}),
         ("t5-bias", 3, {"num_buckets": 16, "max_distance": 40})]

C_PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#include "bias.h"
/* argv[1]: int64 pairs (t, u); prints row(t, u)'s values, one line a pair. */
int main(int argc, char **argv)
{
    int64_t tu[2];
    unsigned h;
    FILE *f;
    if (argc != 2 || (f = fopen(argv[1], "rb")) == NULL) return 2;
    while (fread(tu, sizeof tu[0], 2, f) == 2) {
        const int64_t r = SYMBOL_row(tu[0], tu[1]);
        for (h = 0; h < MACRO_COLS; ++h) printf(h ? " " FMT : FMT, CAST SYMBOL[r][h]);
        putchar('\n');
    }
    fclose(f);
    return 0;
}
"""


def _export(tmp_path, scheme, heads, params, **options):
    ext = {"npy": "npy", "bin": "bin", "c": "h"}.get(options.get("format", "onnx"), "onnx")
    name = "-".join(f"{k}{v}" for k, v in options.items())
    config = api.make_config(scheme, L, heads=heads, params=params,
                             out=tmp_path / f"{scheme}-{name}.{ext}", **options)
    result, _ = api.export(config, verify=False)
    return result.path, result.manifest


def _run_c(tmp_path, path, manifest, queries, keys) -> np.ndarray:
    """The C header's bias ``[H, N, M]`` at every (query, key) pair, through ``_row``."""
    int8 = manifest["quant"] is not None
    source = (C_PROGRAM.replace("bias.h", path.name).replace("SYMBOL", manifest["symbol"])
              .replace("MACRO", manifest["macro_prefix"])
              .replace("FMT", '"%d"' if int8 else '"%a"').replace("CAST", "(int)" if int8
                                                                   else "(double)"))
    src, exe, data = tmp_path / "print.c", tmp_path / "print", tmp_path / "pairs.bin"
    src.write_text(source)
    subprocess.run([compiler(), *COMPILE_FLAGS, "-O2", "-I", str(path.parent), str(src), "-o",
                    str(exe)], check=True)
    pairs = np.stack(np.meshgrid(queries, keys, indexing="ij"), axis=-1).astype("<i8")
    data.write_bytes(pairs.tobytes())
    out = subprocess.run([str(exe), str(data)], check=True, capture_output=True, text=True)
    lines = out.stdout.split()
    if int8:
        q = np.array(lines, dtype=np.int64).reshape(len(queries), len(keys), -1)
        values = (q * np.asarray(manifest["quant"]["scale"], np.float32)).astype(np.float32)
    else:
        values = np.array([float.fromhex(v) for v in lines], np.float32).reshape(
            len(queries), len(keys), -1)
    return np.moveaxis(values, -1, 0)


def _every_format(tmp_path, scheme, heads, params, quantize="none"):
    """name -> a function (queries, keys) -> bias [H, N, M], for every table format."""
    readers = {}
    for fmt in ("onnx", "npy", "bin") + (("c",) if compiler() is not None else ()):
        options = {"format": fmt, "mode": "table"}
        if quantize != "none":
            options["quantize"] = quantize
        path, manifest = _export(tmp_path, scheme, heads, params, **options)
        if fmt == "c":
            readers[fmt] = (lambda q, k, p=path, m=manifest: _run_c(tmp_path, p, m, q, k))
        else:
            readers[fmt] = edgepe.load(path).encode
    return readers


@pytest.mark.parametrize(("scheme", "heads", "params"), CASES, ids=[c[0] for c in CASES])
def test_decode_far_past_max_len_equals_the_compute_graph_on_every_format(
        tmp_path, scheme, heads, params):
    """Acceptance: positions 10^4 .. 10^4 + 8, keys in the last 64, table of max_len 64."""
    compute, _ = _export(tmp_path, scheme, heads, params)
    want = edgepe.load(compute).encode(QUERIES, KEYS)
    assert np.unique(want[0]).size > 1  # recency is there: the bias is not flat
    readers = _every_format(tmp_path, scheme, heads, params)
    assert "c" in readers or compiler() is None
    for name, read in readers.items():
        got = read(QUERIES, KEYS)
        assert got.dtype == want.dtype and np.array_equal(got, want), name


@pytest.mark.parametrize("quantize", ["none", "int8"])
@pytest.mark.parametrize(("scheme", "heads", "params"), CASES, ids=[c[0] for c in CASES])
def test_distances_past_the_table_clamp_alike_in_every_format(
        tmp_path, scheme, heads, params, quantize):
    """Far and extreme pairs (int64's ends included) give the same values in every format:
    the table row of ``clamp(t - u, -(L - 1), L - 1)``; int8 compute graphs too."""
    readers = _every_format(tmp_path, scheme, heads, params, quantize)
    if quantize == "int8":
        compute, _ = _export(tmp_path, scheme, heads, params, quantize="int8")
        readers["onnx-compute"] = edgepe.load(compute).encode
    npy_path, manifest = _export(tmp_path, scheme, heads, params, format="npy",
                                 quantize=quantize)
    table = edgepe.load(npy_path)._rows(np.arange(2 * L - 1))  # [2L - 1, H], dequantised
    rows = bias_rows(FAR_QUERIES, FAR_KEYS, L)
    want = np.moveaxis(table[rows], -1, 0)
    for name, read in readers.items():
        got = read(FAR_QUERIES, FAR_KEYS)
        assert np.array_equal(got, want), name


@pytest.mark.parametrize(("scheme", "heads", "params"), CASES, ids=[c[0] for c in CASES])
def test_int64_extremes_read_the_same_rows_in_the_graphs_and_the_c_header(
        tmp_path, scheme, heads, params):
    """Graphs and C take every int64 (no overflow in ``t - u``): the rows of ``bias_rows``."""
    import onnxruntime as ort

    npy_path, _ = _export(tmp_path, scheme, heads, params, format="npy")
    table = np.load(npy_path)
    want = np.moveaxis(table[bias_rows(EXTREMES, EXTREMES, L)], -1, 0)
    path, _ = _export(tmp_path, scheme, heads, params, mode="table")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(["bias"], {"positions": EXTREMES, "key_positions": EXTREMES})[0]
    assert np.array_equal(got, want)
    if compiler() is not None:
        path, manifest = _export(tmp_path, scheme, heads, params, format="c", mode="table")
        assert np.array_equal(_run_c(tmp_path, path, manifest, EXTREMES, EXTREMES), want)
    if scheme == "t5-bias":  # its int8 compute graph extrapolates: |pos| <= 2^24, as float32
        return
    # the int8 compute graph (it takes every int64) against the int8 table's rows
    q_npy, _ = _export(tmp_path, scheme, heads, params, format="npy", quantize="int8")
    q_table = edgepe.load(q_npy)._rows(np.arange(2 * L - 1))
    q_path, _ = _export(tmp_path, scheme, heads, params, quantize="int8")
    got = edgepe.load(q_path).encode(EXTREMES, EXTREMES)
    assert np.array_equal(got, np.moveaxis(q_table[bias_rows(EXTREMES, EXTREMES, L)], -1, 0))


def test_bias_rows_is_the_clamped_distance():
    """The index itself, against the policy in words (no int64 overflow anywhere)."""
    t = np.array([10**4, 10**4, 10**4, -(2**63), 2**63 - 1, 2**61 + 5], dtype=np.int64)
    u = np.array([10**4 - 63, 10**4 + 70, 0, 2**63 - 1, -(2**63), 2**61 + 2], dtype=np.int64)
    rows = bias_rows(t, u, L)
    exact = [max(-(L - 1), min(L - 1, max(-BIAS_SATURATION, min(BIAS_SATURATION, int(a)))
                             - max(-BIAS_SATURATION, min(BIAS_SATURATION, int(b)))))
             + L - 1 for a, b in zip(t, u, strict=True)]
    assert np.diag(rows).tolist() == exact
    assert exact[:5] == [2 * L - 2, 0, 2 * L - 2, 0, 2 * L - 2]
    assert exact[5] == L - 1  # both saturate at 2^61: distance 0 past the saturation


@pytest.mark.parametrize("scheme,heads,params", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bias_compute_graph_interface(scheme, heads, params, dtype):
    """The compute graph's contract, as a runtime binds it: inputs ``positions [N]`` and
    ``key_positions [M]`` int64, output ``bias [H, N, M]`` in ``--dtype``, the graph and its
    one constant named for the scheme; float16 output is the float32 bias rounded once."""
    import onnx
    import onnxruntime as ort

    from edgepe.contract.config import ExportConfig, base_manifest
    from edgepe.formats.onnx import output_shape
    from edgepe.graphs import builder
    from edgepe.schemes import build, resolve

    config = ExportConfig(scheme=resolve(scheme, L, None, heads, params), dtype=dtype)
    module = build(config.scheme)
    model = builder(scheme, "compute")(config, module, base_manifest(config, output_shape(config),
                                                                   dtype))
    graph = model.graph

    def dims(value):
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    assert graph.name == f"edgepe_{scheme.replace('-', '_')}"
    assert [(v.name, dims(v), v.type.tensor_type.elem_type) for v in graph.input] == [
        ("positions", ["N"], onnx.TensorProto.INT64),
        ("key_positions", ["M"], onnx.TensorProto.INT64)]
    elem = onnx.TensorProto.FLOAT16 if dtype == "float16" else onnx.TensorProto.FLOAT
    assert [(v.name, dims(v), v.type.tensor_type.elem_type) for v in graph.output] == [
        ("bias", [heads, "N", "M"], elem)]
    constant = {"alibi": "neg_slopes", "gaussian": "two_sigma_sq",
                "t5-bias": "relative_attention_bias"}[scheme]
    assert constant in {t.name for t in graph.initializer}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"positions": QUERIES, "key_positions": KEYS})[0]
    assert got.dtype == np.dtype(dtype) and got.shape == (heads, len(QUERIES), len(KEYS))
    if dtype == "float16":
        f32 = ExportConfig(scheme=config.scheme)
        ref = builder(scheme, "compute")(f32, module, base_manifest(f32, output_shape(f32),
                                                                    "float32"))
        want = ort.InferenceSession(ref.SerializeToString(), providers=[
            "CPUExecutionProvider"]).run(None, {"positions": QUERIES, "key_positions": KEYS})[0]
        np.testing.assert_array_equal(got, want.astype(np.float16))


# -- t5-bias's compute graph: T5's buckets without a Log (issue 40) ---------------------------

T5_CASES = [  # (heads, params): both directions, odd num_buckets, T5's own sizes
    (3, {"num_buckets": 32, "max_distance": 128}),
    (2, {"num_buckets": 33, "max_distance": 40}),
    (3, {"num_buckets": 32, "max_distance": 128, "direction": "causal"}),
    (2, {"num_buckets": 20, "max_distance": 12, "direction": "causal"}),
]


@pytest.mark.parametrize(("heads", "params"), T5_CASES, ids=[
    f"{p.get('direction', 'bi')}-{p['num_buckets']}" for _, p in T5_CASES])
def test_t5_bias_graph_has_no_log_and_equals_the_reference_at_every_distance(heads, params):
    """Every distance -600 .. 600 (queries and keys on both sides of each other), and far pairs
    up to 2^25 apart: bitwise ``T5Bias.encode``, whose bucket is transformers' float32 log; the
    graph holds only integer ops up to the embedding's Gather, and the lookup it gathers is
    ``magnitude_buckets``, the saturated tail cut off."""
    import onnxruntime as ort
    import torch

    from edgepe.contract.config import ExportConfig, base_manifest
    from edgepe.formats.onnx import output_shape
    from edgepe.graphs import bias
    from edgepe.schemes import build, resolve

    config = ExportConfig(scheme=resolve("t5-bias", L, None, heads, params))
    module = build(config.scheme)
    model = bias.t5_bias(config, module, base_manifest(config, output_shape(config), "float32"))
    ops = {n.op_type for n in model.graph.node}
    assert "Log" not in ops and ops <= {"Unsqueeze", "Sub", "Neg", "Abs", "Less", "Greater",
                                        "Where", "Gather", "Add", "Transpose"}
    consts = {t.name: onnx_array(t) for t in model.graph.initializer}
    lut = consts["distance_buckets"]
    assert lut.dtype == np.int64 and np.array_equal(lut, module.magnitude_buckets().numpy())
    assert lut[-2] != lut[-1]  # the lookup stops where the buckets stop changing
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    keys = np.arange(600, dtype=np.int64)
    for queries in (np.arange(0, 600, 7, dtype=np.int64), FAR_QUERIES):
        for k in (keys, FAR_KEYS):
            got = session.run(["bias"], {"positions": queries, "key_positions": k})[0]
            with torch.no_grad():
                want = module.encode(torch.from_numpy(queries), torch.from_numpy(k)).numpy()
            assert np.array_equal(got, want)
    # the rows read are the buckets of u - t in -300 .. 299: the graph does not just saturate
    got = session.run(["bias"], {"positions": np.array([300], np.int64), "key_positions": keys})
    weight = module.relative_attention_bias.weight.detach().numpy()
    reached = {int(np.flatnonzero((weight == row).all(axis=1))[0]) for row in got[0][:, 0].T}
    half = params["num_buckets"] // 2
    if "direction" in params:  # causal: keys after the query share bucket 0
        assert reached == {int(b) for b in lut}
    else:  # a later key is at least 1 away: bucket num_buckets // 2 is never read
        assert reached == {int(b) for b in lut} | {half + int(b) for b in lut[1:]}
        assert half not in reached and len(reached) == 2 * len(set(lut.tolist())) - 1


def onnx_array(tensor) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)
