"""Random int64 positions (in range, past max_len, negative, int64's edges): artifact and reference
agree on the documented out-of-range behaviour, and the reference itself follows that policy.

Policies (DESIGN.md, ``spec.oob``): bit schemes wrap (the bits of ``pos mod 2^n``, two's
complement for negatives); float schemes extrapolate the formula up to ``|pos| <= 2^24``
(``position_limit``; positions past it are refused, so they are not drawn); ``mixed`` schemes
wrap their bits and extrapolate their linear part; table artifacts clamp every position (and key
position) to ``[0, max_len - 1]``, as do int8 graphs of unbounded schemes (their manifest says
``clamp``); int8 graphs are held to their proven ``quant.bound``. The artifacts run on
onnxruntime CPU and, for the C compute function, through gcc.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from _table_oracle import clamped_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgepe.export import ExportConfig, export
from edgepe.schemes import build, resolve, scheme_ids

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
L = 37

# (scheme, mode, format, kwargs): every out-of-range policy, both kinds, multi-index, bias, C.
ARTIFACTS = [
    ("gray", "compute", "onnx", {}),
    ("gray", "compute", "onnx", {"lowering": "arith"}),
    ("binary", "compute", "onnx", {}),
    ("binary-signed", "compute", "onnx", {}),
    ("binary-2d", "compute", "onnx", {}),
    ("hierarchical", "compute", "onnx", {}),
    ("integer-norm", "compute", "onnx", {}),
    ("sinusoidal", "compute", "onnx", {}),
    ("hybrid-int-binary", "compute", "onnx", {}),
    ("binary-gated", "compute", "onnx", {}),
    ("sinusoidal-learned", "compute", "onnx", {}),
    ("alibi", "compute", "onnx", {}),
    ("gaussian", "compute", "onnx", {}),
    ("t5-bias", "compute", "onnx", {}),
    ("t5-bias", "table", "onnx", {}),
    ("mrope", "compute", "onnx", {}),
    ("gray", "table", "onnx", {}),
    ("learned", "table", "onnx", {}),
    ("sinusoidal", "table", "onnx", {}),
    ("alibi", "table", "onnx", {}),
    ("binary-2d", "table", "onnx", {}),
    ("gray", "compute", "c", {}),
    # every other scheme once, so each one's policy meets random int64 positions
    ("binary-bits", "compute", "onnx", {}),
    ("binary-smooth", "compute", "onnx", {}),
    ("binary-multilevel", "compute", "onnx", {}),
    ("fourier-binary", "compute", "onnx", {}),
    ("integer", "compute", "onnx", {}),
    ("integer-multiscale", "compute", "onnx", {}),
    ("integer-learnable", "compute", "onnx", {}),
    ("rope", "compute", "onnx", {}),
    ("gaussian", "table", "onnx", {}),
    # table files, read back through edgepe.load (numpy and the manifest)
    ("sinusoidal", "table", "npy", {}),
    ("gray", "table", "bin", {"dtype": "bit"}),
    ("binary", "table", "npy", {"quantize": "int8"}),
    # int8: the projection wraps like binary; an unbounded scheme's int8 graph clamps to its
    # in-range table (manifest policy "clamp"); sinusoidal extrapolates within its bound.
    ("binary", "compute", "onnx", {"quantize": "int8"}),
    ("integer-norm", "compute", "onnx", {"quantize": "int8"}),
    ("sinusoidal", "compute", "onnx", {"quantize": "int8"}),
    ("alibi", "compute", "onnx", {"quantize": "int8"}),
]


def test_every_scheme_meets_random_positions() -> None:
    """Completeness: a scheme added to the registry must join ARTIFACTS."""
    assert {a[0] for a in ARTIFACTS} == set(scheme_ids())


def _id(a) -> str:
    return "-".join([a[0], a[1], a[2], *a[3].values()])


@pytest.fixture(scope="module", params=ARTIFACTS, ids=_id)
def artifact(request, tmp_path_factory):
    scheme, mode, fmt, kw = request.param
    config = resolve(scheme, L)
    out = tmp_path_factory.mktemp("hyp") / f"{_id(request.param)}.{'h' if fmt == 'c' else fmt}"
    manifest = export(ExportConfig(scheme=config, mode=mode, format=fmt, out=out, **kw)).manifest
    module = build(config)
    if fmt == "c":
        import tempfile

        from edgepe.verify import c_runner

        workdir = tempfile.TemporaryDirectory()
        exe = c_runner.compile_program(out, manifest, workdir.name)

        def run(feeds):
            return c_runner.run_program(exe, manifest, feeds["positions"])

        yield config, module, manifest, run
        workdir.cleanup()
        return
    if fmt in ("npy", "bin"):
        import edgepe

        table = edgepe.load(out)
        yield config, module, manifest, lambda feeds: table.encode(feeds["positions"])
        return
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name
    yield config, module, manifest, lambda feeds: session.run([output], feeds)[0]


def positions(limit: int | None, size: int = 24):
    """int64 positions of every kind, within ``|p| <= limit`` when the scheme has one."""
    low, high = (INT64_MIN, INT64_MAX) if limit is None else (-limit, limit)
    edges = [p for p in (-1, 0, L - 1, L, 2**6 - 1, 2**6, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                         2**24, -(2**24), INT64_MAX, INT64_MIN) if low <= p <= high]
    one = st.one_of(
        st.integers(0, L - 1),                      # in range
        st.integers(L, min(high, 4 * L)),           # just past max_len
        st.integers(L, high),                       # anywhere past it
        st.integers(low, -1),                       # negative
        st.sampled_from(edges),                     # edges: 2^n, 2^31, 2^32, int64 limits
    )
    return st.lists(one, min_size=1, max_size=size).map(lambda v: np.asarray(v, np.int64))


def _wrap(p: np.ndarray, n: int) -> np.ndarray:
    return p & ((1 << n) - 1)


def _encode(module, p, k=None):
    with torch.no_grad():
        pt = torch.from_numpy(p)
        out = module.encode(pt) if k is None else module.encode(pt, torch.from_numpy(k))
    return out.numpy()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(data=st.data())
def test_artifact_and_reference_agree_out_of_range(artifact, data):
    config, module, manifest, run = artifact
    policy = manifest["positions"]["out_of_range"]
    limit = manifest["positions"]["limit"]
    if policy == "clamp" and manifest["format"] != "npy" and manifest["format"] != "bin":
        limit = None  # a clamping graph takes every int64; edgepe.load (files) keeps the limit
    p = data.draw(positions(limit))
    table = manifest["mode"] == "table" or policy == "clamp"  # clamp: the in-range table
    if config.spec.kind == "bias":
        k = data.draw(positions(limit, 8))
        feeds = {"positions": p, "key_positions": k}
        # clamp (tables, clamping int8 graphs): the reference at positions clamped to the table
        expected = (clamped_reference(config, module, p, k).numpy() if table
                    else _encode(module, p, k))
    else:
        if config.arity is not None:
            others = data.draw(st.lists(positions(limit, len(p)), min_size=config.arity - 1,
                                        max_size=config.arity - 1))
            cols = [p] + [np.resize(o, len(p)) for o in others]
            p = np.stack(cols, axis=1)
        feeds = {"positions": p}
        expected = clamped_reference(config, module, p).numpy() if table else _encode(module, p)
        if not table and policy == "wrap":
            n = config.n_bits
            if config.scheme == "hierarchical":  # each level wraps at its own width
                widths = np.asarray(config.params["widths"])
                wrapped = p & ((np.int64(1) << widths) - 1)
            else:
                wrapped = _wrap(p, n)
            assert np.array_equal(expected, _encode(module, wrapped))
    actual = run(feeds).astype(np.float64)
    rtol, atol = manifest["tolerance"]["rtol"], manifest["tolerance"]["atol"]  # 0 when exact
    if manifest["quant"]:  # int8: the proven bound, which holds for every position
        rtol, atol = 0.0, manifest["quant"]["bound"]
    assert actual.shape == expected.shape
    close = np.abs(actual - expected) <= atol + rtol * np.abs(expected)
    bad = np.argwhere(~close)
    assert not bad.size, (
        f"{len(bad)} elements differ, first at output index {tuple(bad[0])} of inputs {feeds}: "
        f"got {actual[tuple(bad[0])]}, expected {expected[tuple(bad[0])]}"
    )
