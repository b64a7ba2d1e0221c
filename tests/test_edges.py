"""Every limit of the contract at its exact edge: at, one below, one above (issue 33).

Planted bugs survived the suite because limits were only tested far away from their edge (a
manifest read limit, a depth limit off by one, an opset range end). Each test here states the
limit as a literal (so changing it is noticed) and probes both sides of it.
"""

from __future__ import annotations

import io

import onnx
import pytest
from onnx import TensorProto, helper

from edgepe.contract import config as export_artifact
from edgepe.contract import manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.formats import bin as bin_format
from edgepe.graphs import _common
from edgepe.schemes import _registry
from edgepe.schemes._registry import resolve

# ---- the literals (a changed limit is a changed contract: docs and DESIGN.md say these) --------


def test_limits_are_the_documented_numbers():
    assert manifest.MAX_BYTES == 1048576
    assert manifest.MAX_DEPTH == 16
    assert _registry.MAX_LEN_LIMIT == 1099511627776  # 2**40
    assert _registry.D_MODEL_LIMIT == 65536
    assert _registry.HEADS_LIMIT == 1024
    assert _registry.MODULE_BYTES_LIMIT == 2147483648  # 2 GiB
    assert _common.MAX_OPSET == 25
    assert export_artifact.DEFAULT_OPSET == 18 and export_artifact.INT8_OPSET == 19
    assert export_artifact.DEFAULT_TABLE_CAP == 268435456  # 256 MiB
    assert export_artifact.SEED_MAX == 9223372036854775807
    assert export_artifact.C_ALIGN_MAX == 8192


# ---- manifest: read limit, depth limit, schema ranges -----------------------------------------


def _valid() -> dict:
    return {"scheme": "binary", "max_len": 512, "d_model": 64, "heads": None, "kind": "pe",
            "format": "onnx", "mode": "compute", "dtype": "float32", "shape": ["N", 64],
            "sha256": "0" * 64, "positions": {"arity": None}, "params": {}}


def _padded(size: int) -> bytes:
    """A valid manifest of exactly ``size`` bytes (trailing JSON whitespace)."""
    text = manifest.dumps(_valid())
    assert len(text) <= size
    return text + b" " * (size - len(text))


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_manifest_read_limit_at_its_edge(tmp_path, delta):
    art = tmp_path / "pe.onnx"
    art.write_bytes(b"x")
    manifest.path_for(art).write_bytes(_padded(manifest.MAX_BYTES + delta))
    if delta <= 0:
        assert manifest.read(art)["scheme"] == "binary"
    else:
        with pytest.raises(ArtifactError, match=r"is 1048577 bytes; edgepe reads at most 1048576"):
            manifest.read(art)


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_read_bytes_limit_at_its_edge(tmp_path, delta):
    path = tmp_path / "f"
    path.write_bytes(b"a" * (100 + delta))
    if delta <= 0:
        assert manifest.read_bytes(path, "file", 100) == b"a" * (100 + delta)
    else:
        with pytest.raises(ArtifactError, match="is 101 bytes; edgepe reads at most 100"):
            manifest.read_bytes(path, "file", 100)


def _nested(depth: int) -> bytes:
    """A valid manifest whose deepest nesting is ``depth`` (params holds the extra levels)."""
    base = _valid()
    inner: object = 0
    for _ in range(depth - 2):  # the top object is level 1, params level 2
        inner = [inner]
    base["params"] = {"deep": inner} if depth > 2 else {}
    text = manifest.dumps(base)
    assert manifest.nesting_depth(text.decode()) == depth
    return text


@pytest.mark.parametrize("depth", [15, 16, 17])
def test_manifest_depth_limit_at_its_edge(depth):
    data = _nested(depth)
    if depth <= 16:
        assert manifest.loads(data, "m.json")["scheme"] == "binary"
    else:
        with pytest.raises(ArtifactError, match=r"nests 17 levels deep; edgepe reads at most 16"):
            manifest.loads(data, "m.json")


def test_nesting_depth_counts_each_bracket_kind_and_skips_strings():
    assert manifest.nesting_depth("") == 0
    assert manifest.nesting_depth("{}") == 1
    assert manifest.nesting_depth("[[]]") == 2
    assert manifest.nesting_depth('{"a": [{"b": []}]}') == 4
    assert manifest.nesting_depth('{"a": "{{{{[[[["}') == 1
    assert manifest.nesting_depth('[{"x": "\\"[["}, []]') == 2


# (field, lowest allowed, highest allowed or None): the schema's ranges.
RANGES = [
    ("max_len", 1, 2**40),
    ("d_model", 1, 65536),
    ("heads", 1, 1024),
    ("positions.arity", 1, 64),
    ("positions.limit", 0, None),
    ("tolerance.rtol", 0, None),
    ("tolerance.atol", 0, None),
    ("quant.bound", 0, None),
    ("quant.bound_all_positions", 0, None),
    ("pte.max_n", 1, 4096),
]


def _with(name: str, value) -> dict:
    m = _valid()
    parent, _, key = name.rpartition(".")
    if parent:
        base = {"quant": {"scale": 1.0}, "pte": {"max_n": 1, "operators": []}}.get(parent, {})
        m[parent] = {**base, **(m.get(parent) or {}), key: value}
    else:
        m[key] = value
    return m


@pytest.mark.parametrize(("name", "low", "high"), RANGES, ids=[r[0] for r in RANGES])
def test_schema_ranges_at_their_edges(name, low, high):
    integer = name in ("max_len", "d_model", "heads", "positions.arity", "positions.limit",
                       "pte.max_n")
    step = 1 if integer else 1e-9
    manifest.validate(_with(name, low), "m")
    manifest.validate(_with(name, low + step), "m")
    with pytest.raises(ArtifactError, match=name.replace(".", r"\.") + " must be"):
        manifest.validate(_with(name, low - step), "m")
    if high is not None:
        manifest.validate(_with(name, high), "m")
        manifest.validate(_with(name, high - 1), "m")
        with pytest.raises(ArtifactError, match=name.replace(".", r"\.") + " must be"):
            manifest.validate(_with(name, high + 1), "m")


@pytest.mark.parametrize(("name", "bad"), [
    ("max_len", True), ("max_len", 512.0), ("max_len", "512"), ("d_model", 64.0),
    ("tolerance.atol", float("nan")), ("tolerance.atol", float("inf")), ("tolerance.atol", True),
    ("quant.scale", []), ("quant.scale", [1.0, True]), ("quant.zero_point", [0, 1.0]),
    ("kind", "PE"), ("format", "onnx "), ("sha256", "0" * 63), ("sha256", "A" * 64),
    ("bitorder", "LITTLE"), ("shape", "N"),
], ids=lambda v: repr(v)[:20])
def test_schema_types_one_at_a_time(name, bad):
    """A value of the wrong type next to a right one (True for 1, 512.0 for 512) is refused."""
    with pytest.raises(ArtifactError):
        manifest.validate(_with(name, bad), "m")


@pytest.mark.parametrize("field", [f.name for f in manifest.SCHEMA if f.required
                                   and "." not in f.name])
def test_each_required_field_missing_is_refused(field):
    m = _valid()
    del m[field]
    with pytest.raises(ArtifactError, match=f"it lacks {field}$"):
        manifest.validate(m, "m")


def test_table_shape_rule_at_its_edges():
    table = {**_valid(), "format": "npy", "mode": "table"}
    manifest.validate({**table, "shape": [1, 1]}, "m")
    for bad in ([0, 64], [512, 0], [512], [512, 64, 1], [512.0, 64], [True, 64]):
        with pytest.raises(ArtifactError, match="two positive integers"):
            manifest.validate({**table, "shape": bad}, "m")
    with pytest.raises(ArtifactError, match="npy and bin hold tables"):
        manifest.validate({**table, "mode": "compute"}, "m")
    with pytest.raises(ArtifactError, match="needs heads"):
        manifest.validate({**_valid(), "kind": "bias", "heads": None}, "m")


# ---- sizes: max_len, d_model, heads -------------------------------------------------------------


@pytest.mark.parametrize(("name", "limit"), [("max_len", 2**40), ("d_model", 65536),
                                              ("heads", 1024)])
def test_registry_size_limits_at_their_edges(name, limit):
    size = _registry._size
    assert size(name, limit, limit) == limit
    assert size(name, limit - 1, limit) == limit - 1
    assert size(name, 1, limit) == 1
    for bad in (limit + 1, 0):
        with pytest.raises(BadParameterError, match=f"{name} must be between 1 and {limit}"):
            size(name, bad, limit)


def test_resolve_applies_each_limit():
    """``resolve`` passes each size through its own limit (allocates nothing)."""
    assert resolve("gray", 2**40).max_len == 2**40
    with pytest.raises(BadParameterError, match=r"max_len must be between 1 and 1099511627776"):
        resolve("gray", 2**40 + 1)
    # a float scheme stops at its position limit (issue 30): 2^24, where float32 stops being exact
    assert resolve("integer", 2**24).max_len == 2**24
    with pytest.raises(BadParameterError, match=r"its cap is 16777216"):
        resolve("integer", 2**24 + 1)
    assert resolve("integer", 8, d_model=65536).d_model == 65536
    with pytest.raises(BadParameterError, match="d_model must be between 1 and 65536"):
        resolve("integer", 8, d_model=65537)
    assert resolve("alibi", 8, heads=1024).heads == 1024
    with pytest.raises(BadParameterError, match="heads must be between 1 and 1024"):
        resolve("alibi", 8, heads=1025)


def test_module_bytes_limit_at_its_edge():
    """A learned table of exactly 2 GiB of float32 is allowed, one row more is refused."""
    d = 64
    rows = 2**31 // (4 * d)  # 8388608 rows of 64 float32 = 2 GiB
    assert resolve("learned", rows, d_model=d).max_len == rows
    with pytest.raises(BadParameterError, match="over the 2 GiB a reference module may hold"):
        resolve("learned", rows + 1, d_model=d)


# ---- table byte limits --------------------------------------------------------------------------


def _export_config(scheme: str, max_len: int, cap: int, dtype: str = "float32", **kw):
    return export_artifact.ExportConfig(scheme=resolve(scheme, max_len, **kw), mode="table",
                                        format="npy", dtype=dtype, max_table_bytes=cap)


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_table_byte_cap_at_its_edge(delta):
    size = 5 * 64 * 4  # binary, max_len 5: [5, 64] float32
    config = _export_config("binary", 5, size + delta)
    if delta >= 0:
        assert bin_format.check_table_size(config, "float32") == size
    else:
        with pytest.raises(BadParameterError, match="--max-table-bytes"):
            bin_format.check_table_size(config, "float32")


@pytest.mark.parametrize(("dtype", "size"), [("float16", 5 * 64 * 2), ("uint8", 5 * 3),
                                              ("bit", 2)])
def test_table_size_per_dtype(dtype, size):
    """float16 2 bytes an entry, uint8 one, bit ceil(entries / 8): binary-bits at max_len 5 is
    [5, 3], 15 bits, 2 bytes (a floor would give 1)."""
    scheme = "binary" if dtype == "float16" else "binary-bits"
    config = _export_config(scheme, 5, size, dtype=dtype)
    assert bin_format.check_table_size(config, dtype) == size
    with pytest.raises(BadParameterError):
        bin_format.check_table_size(_export_config(scheme, 5, size - 1, dtype=dtype), dtype)


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_int8_measurement_cap_at_its_edge(delta):
    from edgepe.graphs.int8 import check_measurable

    size = 4 * 5 * 64
    config = _export_config("binary", 5, size + delta)
    if delta >= 0:
        check_measurable(config)
    else:
        with pytest.raises(BadParameterError, match=f"{size} bytes of float32"):
            check_measurable(config)


# ---- export options: opset, seed, c_align, max_table_bytes --------------------------------------


def _config(**kw):
    return export_artifact.ExportConfig(scheme=resolve("binary", 8), **kw)


@pytest.mark.parametrize(("field", "good", "bad"), [
    ("opset", (1, 2, 29, 30), (0, 31)),
    ("seed", (0, 1, 2**63 - 2, 2**63 - 1), (-1, 2**63)),
    ("c_align", (1, 2, 4096, 8192), (0, 3, 8191, 16384)),
    ("max_table_bytes", (1, 2), (0, -1)),
])
def test_export_option_ranges_at_their_edges(field, good, bad):
    for value in good:
        export_artifact.validate_choices(_config(**{field: value}))
    for value in bad:
        with pytest.raises(BadParameterError):
            export_artifact.validate_choices(_config(**{field: value}))


def _nodes(op: str):
    return [helper.make_node(op, ["a", "b"], ["c"])]


def test_graph_opset_range_at_its_edges():
    """onnxruntime loads up to opset 25; BitwiseAnd exists from 18: both ends, both sides."""
    _common.check_opset(_nodes("BitwiseAnd"), 18)
    _common.check_opset(_nodes("BitwiseAnd"), 25)
    with pytest.raises(BadParameterError, match="--opset 17 is too low: BitwiseAnd needs opset 18"):
        _common.check_opset(_nodes("BitwiseAnd"), 17)
    with pytest.raises(BadParameterError, match="--opset 26 is too high"):
        _common.check_opset(_nodes("BitwiseAnd"), 26)
    _common.check_opset(_nodes("Add"), 7)


@pytest.mark.parametrize(("opset", "ok"), [(24, True), (25, True), (26, False)])
def test_export_at_the_highest_opset(opset, ok):
    from edgepe.export import prepare

    config = _config(opset=opset)
    if not ok:
        with pytest.raises(BadParameterError, match="--opset 26 is too high"):
            prepare(config)
        return
    buffer = io.BytesIO()
    prepare(config).write(buffer)
    model = onnx.load_from_string(buffer.getvalue())
    assert next(o.version for o in model.opset_import if o.domain == "") == opset


def test_int8_opset_floor_at_its_edge():
    from edgepe.export import prepare

    prepare(_config(quantize="int8", opset=19))
    with pytest.raises(BadParameterError, match="--opset 18 is too low"):
        prepare(_config(quantize="int8", opset=18))


# ---- target profiles: opset range ends and the verdict on graph-level problems ---------------


def _supported_model(profile, opset: int, extra_init=None) -> onnx.ModelProto:
    """A static-shaped float32 graph of one op the profile runs (Add, or MatMul for xnnpack)."""
    op = "MatMul" if "Add" not in profile.ops else "Add"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    inits = [onnx.numpy_helper.from_array(__import__("numpy").eye(2, dtype="float32"), "w")]
    inits += extra_init or []
    graph = helper.make_graph([helper.make_node(op, ["x", "w"], ["y"])], "g", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


# The documented opset range of each profile (docs/readme/targets.md), as literals.
OPSETS = {"ort-cpu": (7, 25), "ort-cuda": (7, 25), "directml": (7, 25), "tensorrt": (9, 20),
          "openvino": (7, 25), "qnn": (7, 21), "coreml": (7, 21), "nnapi": (7, 19),
          "xnnpack": (7, 21)}


def test_every_profile_is_listed_with_its_range():
    from edgepe.targets.profiles import PROFILES

    assert {n: p.opsets for n, p in PROFILES.items()} == OPSETS


@pytest.mark.parametrize("name", sorted(OPSETS))
def test_target_opset_range_ends_and_verdict(name):
    """At both ends the graph is supported; one past either end the verdict is NOT supported
    although every node is: a graph-level problem decides the verdict on its own."""
    from edgepe.targets import PROFILES
    from edgepe.targets.check import check

    profile = PROFILES[name]
    lo, hi = OPSETS[name]
    for opset in (lo, lo + 1, hi - 1, hi):
        report = check(_supported_model(profile, opset), profile)
        assert report and not report.problems, (opset, str(report))
    for opset in (lo - 1, hi + 1):
        report = check(_supported_model(profile, opset), profile)
        assert all(n.supported for n in report.nodes)
        assert not report, (opset, str(report))
        assert report.problems == [f"opset {opset}: {name} loads opsets {lo} to {hi}"]
        assert report.blocking[0] == report.problems[0]
        assert str(report).startswith(f"target {name}: NOT supported, 0 of 1 nodes unsupported")


@pytest.mark.parametrize("name", sorted(OPSETS))
def test_uint64_initializer_verdict_per_profile(name):
    """Only the profiles with the no-uint64-initializers rule (tensorrt) refuse the graph for an
    unused uint64 initializer; the others accept it."""
    import numpy as np

    from edgepe.targets import PROFILES
    from edgepe.targets.check import check

    profile = PROFILES[name]
    wide = onnx.numpy_helper.from_array(np.array([1], dtype=np.uint64), "wide")
    report = check(_supported_model(profile, 17, [wide]), profile)
    if name == "tensorrt":
        assert not report and report.problems[0].startswith("uint64 initializers (wide)")
    else:
        assert report, str(report)


def test_static_shapes_rule_notes_dynamic_inputs():
    from edgepe.targets import PROFILES
    from edgepe.targets.check import check

    for name in ("qnn", "nnapi"):
        profile = PROFILES[name]
        model = _supported_model(profile, 17)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
        report = check(model, profile)
        assert report.notes[0].startswith("inputs x have dynamic dims")
    report = check(_supported_model(PROFILES["ort-cpu"], 17), PROFILES["ort-cpu"])
    assert not any("dynamic" in n for n in report.notes)
