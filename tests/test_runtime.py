"""``edgepe.load``: encode and apply against the reference modules, offsets, batches, errors.

Artifacts are real exports (``edgepe.export.export``) of a few schemes in ONNX compute, ONNX
table, npy and bin; the reference is the scheme's module (``encode``/``forward``) for compute
artifacts and ``clamped_reference`` (tests/_table_oracle.py: positions clamped to the table)
for tables. Compared with the scheme's own tolerance: exact for bit and integer outputs.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
import torch
from _table_oracle import clamped_reference

import edgepe
from edgepe.contract.errors import ArtifactError, BadParameterError, EdgepeError, PositionError
from edgepe.export import ExportConfig, export
from edgepe.schemes import build, resolve

# (id, scheme, max_len, d_model, mode, format, dtype, extra)
CASES = [
    ("binary-onnx", "binary", 64, 16, "compute", "onnx", "float32", {}),
    ("binary-onnx-table", "binary", 64, 16, "table", "onnx", "float32", {}),
    ("binary-npy", "binary", 64, 16, "table", "npy", "float32", {}),
    ("gray-onnx", "gray", 64, None, "compute", "onnx", "float32", {}),
    ("gray-bin-bit", "gray", 64, None, "table", "bin", "bit", {}),
    ("gray-npy-bit", "gray", 64, None, "table", "npy", "bit", {}),
    ("sinusoidal-onnx", "sinusoidal", 64, 16, "compute", "onnx", "float32", {}),
    ("sinusoidal-bin", "sinusoidal", 64, 16, "table", "bin", "float32", {}),
    ("sinusoidal-npy-f16", "sinusoidal", 64, 16, "table", "npy", "float16", {}),
    ("rope-onnx", "rope", 64, 16, "compute", "onnx", "float32", {}),
    ("rope-onnx-apply", "rope", 64, 16, "compute", "onnx", "float32", {"rope_graph": "apply"}),
    ("rope-npy", "rope", 64, 16, "table", "npy", "float32", {}),
    ("alibi-onnx", "alibi", 32, None, "compute", "onnx", "float32", {}),
    ("alibi-npy", "alibi", 32, None, "table", "npy", "float32", {}),
    ("gaussian-onnx", "gaussian", 32, None, "compute", "onnx", "float32", {}),
    ("gaussian-bin", "gaussian", 32, None, "table", "bin", "float32", {}),
    ("learned-bin", "learned", 32, 8, "table", "bin", "float32", {}),
    ("binary-2d-onnx", "binary-2d", 16, None, "compute", "onnx", "float32", {}),
    ("binary-2d-bin-u8", "binary-2d", 16, 12, "table", "bin", "uint8", {}),
    ("hierarchical-npy", "hierarchical", 16, None, "table", "npy", "float32", {}),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """id -> (path, SchemeConfig, module, mode)."""
    root = tmp_path_factory.mktemp("runtime")
    made = {}
    for name, scheme, max_len, d_model, mode, fmt, dtype, extra in CASES:
        config = resolve(scheme, max_len, d_model=d_model)
        out = root / f"{name}.{fmt}"
        export(ExportConfig(scheme=config, mode=mode, format=fmt, dtype=dtype, out=out,
                            extra=extra))
        made[name] = (out, config, build(config), mode)
    return made


def _positions(config, extra=()) -> np.ndarray:
    """In range, negative and past the end (within every scheme's limit), plus ``extra``."""
    p = np.array([*range(-3, config.max_len + 4), 1000, -1000, *extra], dtype=np.int64)
    return p if config.arity is None else np.stack([np.roll(p, k) for k in range(config.arity)], 1)


def _reference(config, module, mode, positions, keys=None) -> np.ndarray:
    with torch.no_grad():
        if mode == "table":
            return clamped_reference(config, module, positions, keys).numpy()
        args = (torch.as_tensor(positions),)
        if keys is not None:
            args += (torch.as_tensor(keys),)
        return module.encode(*args).numpy()


def _close(got, want, config) -> None:
    rtol, atol = config.spec.tolerance
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", [i for i in IDS if i != "rope-onnx-apply"])
def test_encode_matches_reference(artifacts, name):
    path, config, module, mode = artifacts[name]
    runtime = edgepe.load(path)
    positions = _positions(config)
    if config.spec.kind == "bias":
        keys = np.array([0, 1, 5, config.max_len - 1, config.max_len + 3, -2], dtype=np.int64)
        got = runtime.encode(positions, keys)
        assert got.shape == (config.heads, len(positions), len(keys))
        _close(got, _reference(config, module, mode, positions, keys), config)
        return
    got = runtime.encode(positions)
    assert got.shape == (len(positions), config.d_model)
    want = _reference(config, module, mode, positions)
    if runtime.manifest["dtype"] == "float16":
        # float16 tables store the reference rounded to nearest: compare with that rounding.
        want = want.astype(np.float16)
        assert got.dtype == np.float16
    _close(got, want, config)


def test_wrapping_schemes_take_every_int64(artifacts):
    """gray wraps (bits of pos mod 2^n): positions near +-2^63 are defined and match."""
    path, config, module, _ = artifacts["gray-onnx"]
    extremes = np.array([2**63 - 1, -(2**63), 2**62 + 5, -(2**40)], dtype=np.int64)
    _close(edgepe.load(path).encode(extremes), _reference(config, module, "compute", extremes),
           config)


def test_bit_tables_unpack_to_the_stored_bits(artifacts):
    """A bit-packed table reads back as 0/1 uint8, equal to the float table's rows."""
    path, config, module, _ = artifacts["gray-bin-bit"]
    runtime = edgepe.load(path)
    got = runtime.encode(np.arange(config.max_len))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, _reference(config, module, "table",
                                                   np.arange(config.max_len)))


@pytest.mark.parametrize("name", ["binary-onnx", "binary-npy", "sinusoidal-onnx", "gray-bin-bit",
                                  "rope-onnx", "rope-onnx-apply", "rope-npy", "alibi-onnx",
                                  "alibi-npy"])
@pytest.mark.parametrize("offset", [0, 5, 70])
def test_apply_matches_the_module_forward(artifacts, name, offset):
    """``apply(x, offset)`` is ``module.forward(x, offset)``: x + PE, rope rotation, bias."""
    path, config, module, mode = artifacts[name]
    runtime = edgepe.load(path)
    rng = np.random.default_rng(0)
    if config.spec.kind == "bias":
        x = rng.standard_normal((2, config.heads, 6, 9)).astype(np.float32)
    else:
        x = rng.standard_normal((3, 7, config.d_model)).astype(np.float32)
    got = runtime.apply(x, offset=offset)
    assert got.shape == x.shape and got.dtype == x.dtype
    if mode == "table":
        # Tables clamp: the reference is x + (or rotated by) the clamped encoding.
        steps = x.shape[-2]
        positions = np.arange(offset, offset + steps)
        if config.spec.kind == "bias":
            pe = clamped_reference(config, module, positions, np.arange(x.shape[-1])).numpy()
            want = x + pe
        elif config.spec.kind == "rope":
            pe = clamped_reference(config, module, positions).numpy()
            cos, sin = np.split(pe, 2, axis=-1)
            want = np.empty_like(x)
            want[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
            want[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
        else:
            want = x + clamped_reference(config, module, positions).numpy().astype(np.float32)
    else:
        with torch.no_grad():
            want = module(torch.as_tensor(x), offset=offset).numpy()
    rtol, atol = config.spec.tolerance
    np.testing.assert_allclose(got, want, rtol=rtol, atol=max(atol, 1e-6 if rtol else 0))


@pytest.mark.parametrize("name", ["binary-onnx", "rope-onnx", "rope-onnx-apply", "alibi-npy"])
def test_streaming_decode_equals_one_pass(artifacts, name):
    """Token by token with offset = tokens seen gives exactly the whole-sequence result."""
    path, config, _, _ = artifacts[name]
    runtime = edgepe.load(path)
    rng = np.random.default_rng(1)
    if config.spec.kind == "bias":
        # One query row at a time against all keys: scores [H, 1, M] at offset t.
        scores = rng.standard_normal((config.heads, 8, 8)).astype(np.float32)
        whole = runtime.apply(scores)
        steps = [runtime.apply(scores[:, t : t + 1, :], offset=t) for t in range(8)]
        np.testing.assert_array_equal(np.concatenate(steps, axis=1), whole)
        return
    x = rng.standard_normal((2, 9, config.d_model)).astype(np.float32)
    whole = runtime.apply(x)
    pieces = [runtime.apply(x[:, :4], offset=0), runtime.apply(x[:, 4:5], offset=4),
              runtime.apply(x[:, 5:], offset=5)]
    np.testing.assert_array_equal(np.concatenate(pieces, axis=1), whole)


@pytest.mark.parametrize("name", ["binary-onnx", "rope-onnx", "rope-onnx-apply", "sinusoidal-bin"])
def test_batch_and_leading_axes(artifacts, name):
    """Every batch row gets the same encoding; ``[S, D]`` and ``[B, H, S, D]`` work too."""
    path, config, _, _ = artifacts[name]
    runtime = edgepe.load(path)
    x = np.random.default_rng(2).standard_normal((4, 2, 5, config.d_model)).astype(np.float32)
    batched = runtime.apply(x, offset=3)
    for b in range(4):
        for h in range(2):
            np.testing.assert_array_equal(batched[b, h], runtime.apply(x[b, h], offset=3))


def test_apply_with_explicit_positions_for_multi_index(artifacts):
    path, config, module, _ = artifacts["binary-2d-onnx"]
    runtime = edgepe.load(path)
    positions = np.array([[0, 0], [3, 5], [15, 1]], dtype=np.int64)
    x = np.ones((2, 3, config.d_model), dtype=np.float32)
    with torch.no_grad():
        pe = module.encode(torch.as_tensor(positions)).numpy()
    np.testing.assert_array_equal(runtime.apply(x, positions=positions), x + pe)
    with pytest.raises(PositionError, match=r"positions=\.\.\."):
        runtime.apply(x, offset=2)


def test_session_is_made_once_and_reused(artifacts):
    runtime = edgepe.load(artifacts["binary-onnx"][0])
    session = runtime.session
    for start in range(5):
        runtime.encode(np.arange(start, start + 3))
        runtime.apply(np.zeros((1, 2, 16), np.float32), offset=start)
    assert runtime.session is session
    assert runtime.providers == ["CPUExecutionProvider"]


def test_properties_come_from_the_manifest(artifacts):
    path, config, _, _ = artifacts["sinusoidal-bin"]
    runtime = edgepe.load(path)
    assert runtime.scheme == "sinusoidal"
    assert runtime.kind == "pe"
    assert runtime.shape == (64, 16)
    assert runtime.width == 16
    assert runtime.manifest["format"] == "bin"
    assert runtime.manifest["max_len"] == 64
    assert "sinusoidal" in repr(runtime)
    runtime.manifest["scheme"] = "changed"  # a copy: the runtime keeps its own
    assert runtime.scheme == "sinusoidal"


def test_empty_positions_give_empty_rows(artifacts):
    for name in ("binary-onnx", "gray-bin-bit"):
        path, config, _, _ = artifacts[name]
        assert edgepe.load(path).encode(np.zeros(0, np.int64)).shape == (0, config.d_model)


def test_providers_are_forgiving_names(artifacts):
    path = artifacts["gray-onnx"][0]
    for providers in ("cpu", "CPU", ["CPUExecutionProvider"], "cpu,cpu"):
        assert edgepe.load(path, providers=providers).providers == ["CPUExecutionProvider"]
    with pytest.raises(BadParameterError, match="Unknown provider 'cpuu'. Did you mean 'cpu'"):
        edgepe.load(path, providers="cpuu")


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array([0.0, 1.0]), "must be integers.*float64"),
        (np.array([True, False]), "must be integers.*bool"),
        ([0.5, 2], "must be integers"),
        ("0:4", "string"),
        (np.int64(3), r"shape \[N\], got \[\]"),
        (np.zeros((2, 2), np.int64), r"shape \[N\], got \[2, 2\]"),
        (np.array([2**63], dtype=np.uint64), "fit in int64"),
        (np.array([0, 2**24 + 1]), r"within \+-16777216.*got 16777217"),
        (np.array([-(2**63)]), r"within \+-16777216"),
        ([[1, 2], [3]], "integer array"),
    ],
)
def test_bad_positions_are_one_line_position_errors(artifacts, value, match):
    runtime = edgepe.load(artifacts["sinusoidal-onnx"][0])
    with pytest.raises(PositionError, match=match) as exc:
        runtime.encode(value)
    _one_line(exc)


def test_multi_index_and_bias_shape_errors(artifacts):
    two_d = edgepe.load(artifacts["binary-2d-bin-u8"][0])
    with pytest.raises(PositionError, match=r"shape \[N, 2\], got \[3\]") as exc:
        two_d.encode(np.arange(3))
    _one_line(exc)
    with pytest.raises(PositionError, match=r"shape \[N, 2\], got \[3, 3\]"):
        two_d.encode(np.zeros((3, 3), np.int64))
    alibi = edgepe.load(artifacts["alibi-onnx"][0])
    with pytest.raises(PositionError, match="needs key_positions"):
        alibi.encode(np.arange(3))
    with pytest.raises(PositionError, match="key_positions must be integers"):
        alibi.encode(np.arange(3), np.array([0.5]))
    gray = edgepe.load(artifacts["gray-onnx"][0])
    with pytest.raises(PositionError, match="takes no key_positions"):
        gray.encode(np.arange(3), np.arange(3))


def test_apply_input_errors(artifacts):
    runtime = edgepe.load(artifacts["binary-onnx"][0])
    with pytest.raises(BadParameterError, match="float array, got dtype int64"):
        runtime.apply(np.zeros((1, 2, 16), np.int64))
    with pytest.raises(BadParameterError, match=r"D \(last axis\) = 8, but this artifact's is 16"):
        runtime.apply(np.zeros((1, 2, 8), np.float32))
    with pytest.raises(BadParameterError, match="at least 2 dimensions"):
        runtime.apply(np.zeros(16, np.float32))
    with pytest.raises(PositionError, match="offset must be an integer, got 1.5"):
        runtime.apply(np.zeros((1, 2, 16), np.float32), offset=1.5)
    with pytest.raises(PositionError, match="leaves int64"):
        edgepe.load(artifacts["gray-onnx"][0]).apply(np.zeros((1, 3, 7), np.float32),
                                                     offset=2**63 - 2)
    with pytest.raises(PositionError, match="2 rows but x has 3 steps"):
        runtime.apply(np.zeros((1, 3, 16), np.float32), positions=np.arange(2))
    sinusoidal = edgepe.load(artifacts["sinusoidal-onnx"][0])
    with pytest.raises(PositionError, match=r"within \+-16777216"):
        sinusoidal.apply(np.zeros((1, 3, 16), np.float32), offset=2**24 - 1)
    alibi = edgepe.load(artifacts["alibi-npy"][0])
    with pytest.raises(BadParameterError, match=r"H \(axis -3\) = 4, but this artifact's is 8"):
        alibi.apply(np.zeros((4, 2, 2), np.float32))
    apply_graph = edgepe.load(artifacts["rope-onnx-apply"][0])
    with pytest.raises(BadParameterError, match="apply graph"):
        apply_graph.encode(np.arange(3))


def test_files_that_are_not_artifacts_are_artifact_errors(artifacts, tmp_path):
    path = artifacts["gray-onnx"][0]
    with pytest.raises(ArtifactError, match="does not exist") as exc:
        edgepe.load(tmp_path / "missing.onnx")
    _one_line(exc)
    lone = tmp_path / "lone.onnx"  # moved without its .json: read through the embedded copy
    shutil.copy(path, lone)
    assert edgepe.load(lone).manifest["manifest_source"] == "embedded"
    bare = tmp_path / "bare.onnx"  # no .json, and no copy in the graph either
    model = onnx.load(str(path))
    del model.metadata_props[:]
    onnx.save(model, str(bare))
    with pytest.raises(ArtifactError, match="no readable manifest") as exc:
        edgepe.load(bare)
    _one_line(exc)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(path.read_bytes()[:100])
    shutil.copy(str(path) + ".json", str(truncated) + ".json")
    with pytest.raises(ArtifactError, match="sha256 differs") as exc:
        edgepe.load(truncated)
    _one_line(exc)
    with pytest.raises(ArtifactError, match="is not a file"):
        edgepe.load(tmp_path)


def test_c_headers_are_refused_with_the_way_to_use_them(tmp_path):
    out = tmp_path / "gray.h"
    export(ExportConfig(scheme=resolve("gray", 16), mode="table", format="c", out=out))
    with pytest.raises(ArtifactError, match="C header.*#include it") as exc:
        edgepe.load(out)
    _one_line(exc)


def test_every_refusal_is_an_edgepe_error(artifacts):
    """Whatever goes wrong with inputs is an EdgepeError (the CLI's exit 2), never a crash."""
    runtime = edgepe.load(artifacts["binary-2d-onnx"][0])
    for bad in (None, object(), [[1, 2, 3]], np.array([["a", "b"]]), {"x": 1}):
        with pytest.raises(EdgepeError):
            runtime.encode(bad)


@pytest.mark.parametrize(("mode", "fmt"), [("table", "npy"), ("table", "bin"),
                                           ("compute", "onnx")])
def test_int8_artifacts_come_back_dequantised_within_their_bound(tmp_path, mode, fmt):
    """int8 tables dequantise as DequantizeLinear does: the error over every row is exactly the
    manifest's measured ``max_abs_err``, under the proven ``bound`` (graphs: under the bound)."""
    config = resolve("binary", 64, d_model=16)
    out = tmp_path / f"q.{fmt}"
    export(ExportConfig(scheme=config, mode=mode, format=fmt, quantize="int8", out=out))
    runtime = edgepe.load(out)
    quant = runtime.manifest["quant"]
    positions = np.arange(64)
    got = runtime.encode(positions)
    assert got.dtype == np.float32 and got.shape == (64, 16)
    err = np.abs(got.astype(np.float64) - _reference(config, build(config), mode, positions))
    assert err.max() <= quant["bound"]
    if mode == "table":
        assert err.max() == quant["max_abs_err"]
    assert err.max() > 0  # it really is quantised: int8 steps are visible


def test_lists_and_torch_tensors_are_positions_too(artifacts):
    """Anything numpy reads as integers works: lists, int32 arrays, CPU torch tensors."""
    path, config, module, _ = artifacts["binary-onnx"]
    runtime = edgepe.load(path)
    want = runtime.encode(np.array([0, 3, 70], dtype=np.int64))
    for value in ([0, 3, 70], np.array([0, 3, 70], np.int32), np.array([0, 3, 70], np.uint16),
                  torch.tensor([0, 3, 70])):
        np.testing.assert_array_equal(runtime.encode(value), want)
    x = torch.zeros(1, 3, config.d_model)
    np.testing.assert_array_equal(runtime.apply(x, offset=0), runtime.encode([0, 1, 2])[None])


JUNK = (None, "x", -1, 0, 1.5, True, [], {}, [3], [0, 0], 2**70)
FIELDS = ("scheme", "format", "mode", "dtype", "kind", "max_len", "d_model", "heads", "shape",
          "params", "quant", "numpy_dtype", "bitorder", "positions", "positions.arity",
          "positions.limit", "quant.scale", "quant.zero_point", "params.widths")


@pytest.mark.parametrize("name", ["gray-onnx", "gray-bin-bit", "alibi-npy", "binary-2d-bin-u8",
                                  "hierarchical-npy", "sinusoidal-npy-f16", "int8"])
def test_edited_manifests_load_or_refuse_in_one_line(artifacts, tmp_path, name):
    """The sha256 guards the artifact, not its manifest: whatever a field is edited to, load and
    encode either work or raise an EdgepeError with one line, never anything else."""
    import json

    if name == "int8":
        source = tmp_path / "made" / "q.npy"
        export(ExportConfig(scheme=resolve("binary", 16, d_model=4), mode="table",
                            format="npy", quantize="int8", out=source))
    else:
        source = artifacts[name][0]
    original = json.loads((source.parent / (source.name + ".json")).read_text())
    target = tmp_path / source.name
    shutil.copy(source, target)
    outcomes = set()
    for field in FIELDS:
        for value in JUNK:
            manifest = json.loads(json.dumps(original))
            parent, key = manifest, field
            if "." in field:
                head, key = field.split(".")
                parent = manifest.get(head)
                if not isinstance(parent, dict):
                    continue
            parent[key] = value
            (tmp_path / (target.name + ".json")).write_text(json.dumps(manifest))
            try:
                runtime = edgepe.load(target)
                arity = runtime.arity
                positions = np.arange(3) if arity is None else np.zeros((3, arity), np.int64)
                if runtime.kind == "bias":
                    runtime.encode(positions, np.arange(2))
                else:
                    runtime.encode(positions)
                outcomes.add("ok")
            except EdgepeError as exc:
                assert str(exc) and "\n" not in str(exc), (field, value)
                outcomes.add("refused")
    assert outcomes == {"ok", "refused"}  # some edits are harmless, some are caught


def test_cuda_sessions_keep_float32_out_of_tf32():
    """On the GPU the float32 graphs must compute in float32: onnxruntime's CUDA provider uses
    TF32 for MatMul/Gemm unless told not to (6 of 198 grid cells failed on an H100 with it on;
    tests/test_gpu.py runs them where CUDA is installed). Other providers go in unchanged."""
    from edgepe.runtime import with_options

    assert with_options(["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        ("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
