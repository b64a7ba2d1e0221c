"""The fused sliced graph (``--mode sliced --rope-lowering ort|rotary23``), issue 44: sinusoidal's
fused form (its interleaved ``[sin, cos]`` pairs and ``layout=half``), and rows folded into
``[batch, sequence]`` so onnxruntime's CUDA RotaryEmbedding grid stays within CUDA's limits at
any N (``graphs.sliced.fold``; the CUDA run itself is tests/test_gpu.py's).

The structural check reads the shapes every RotaryEmbedding node gets at N past the limit (its
inputs made graph outputs, run on onnxruntime CPU); on the graph before issue 44 (``[N, 1, d]``
rows) it fails from N = 65536, which is where the CUDA provider failed.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgepe.contract.errors import BadParameterError
from edgepe.graphs import sliced as sl
from tests.test_sliced import TRIG_OPS, definition64, make, max_error, run

ROTARY = [("ort", None), ("rotary23", 23)]


@pytest.mark.parametrize("rotary,opset", ROTARY)
@pytest.mark.parametrize("max_len,d_model,params,slices", [
    (4096, 64, None, None),
    (4096, 16, {"layout": "half", "offset": 2}, None),
    (2048, 12, {"frequencies": "fairseq"}, "4,4,3"),
])
def test_sinusoidal_fuses_its_angle_additions_within_the_bound(rotary, opset, max_len, d_model,
                                                               params, slices):
    """sinusoidal ``--mode sliced --rope-lowering ort|rotary23``: one RotaryEmbedding per slice
    above the lowest (``interleaved=1`` for the ``[sin, cos]`` pairs, 0 for ``layout=half``), no
    trig and no arithmetic on the rows, every position the graph accepts (negatives too, the
    padding offset included) within the plain graph's bound of the float64 definition."""
    extra = {"rope_lowering": rotary, **({"slices": slices} if slices else {})}
    config, module, model = make("sinusoidal", max_len, d_model, params, opset=opset,
                                 extra=extra)
    widths = sl.plan_of(config)
    rotaries = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotaries) == len(widths) - 1 and not {n.op_type for n in model.graph.node} & TRIG_OPS
    assert {n.domain for n in rotaries} == ({"com.microsoft"} if rotary == "ort" else {""})
    half = (params or {}).get("layout") == "half"
    assert {a.i for n in rotaries for a in n.attribute if a.name == "interleaved"} == {
        0 if half else 1}
    limit = json.loads(model.metadata_props[0].value)["positions"]["limit"]
    p = np.arange(-limit, limit + 1, dtype=np.int64)
    assert max_error(model, module, p) <= sl.bound(widths)


def test_sinusoidal_fused_refusals():
    with pytest.raises(BadParameterError, match="needs --opset 23"):
        make("sinusoidal", 4096, 32, extra={"rope_lowering": "rotary23"})
    with pytest.raises(BadParameterError, match="after bitwise slicing"):
        make("sinusoidal", 4096, 32, lowering="clip32", extra={"rope_lowering": "ort"})


def test_sinusoidal_rope_lowering_from_the_cli(tmp_path):
    """Exported and verified from the command line; outside ``--mode sliced`` the option is
    refused in one line (exit 2, nothing written)."""
    from typer.testing import CliRunner

    from edgepe.cli import app
    from edgepe.verify import verify_artifact

    out = tmp_path / "s.onnx"
    base = ["export", "--scheme", "sinusoidal", "--max-len", "4096", "--d-model", "64"]
    done = CliRunner().invoke(app, [*base, "--mode", "sliced", "--rope-lowering", "ort",
                                    "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "parity PASSED" in done.output and "against the float64 definition" in done.output
    assert verify_artifact(out)
    refused = CliRunner().invoke(app, [*base, "--rope-lowering", "ort", "--out",
                                       str(tmp_path / "c.onnx")])
    assert refused.exit_code == 2 and not (tmp_path / "c.onnx").exists()
    assert "--rope-lowering applies to --scheme rope and to sinusoidal --mode sliced, not " \
           "'sinusoidal' --mode compute" in refused.output
    other = CliRunner().invoke(app, ["export", "--scheme", "gray", "--max-len", "16",
                                     "--rope-graph", "apply", "--out", str(tmp_path / "g.onnx")])
    assert other.exit_code == 2 and "--rope-graph applies to --scheme rope only, not 'gray'" \
        in other.output


@pytest.mark.parametrize("n", [0, 1, 65534, 65535, 65536, 131071, 262144, 2**24, 2**31 - 1,
                               65535**2 - 1])
def test_fold_keeps_batch_and_sequence_within_the_grid(n):
    """``fold(n)``: both dimensions ``<= 65535``, ``B S >= n`` with less than one sequence of
    padding, and the ``[N, 1]`` form (S = 1) below the limit."""
    b, s = sl.fold(n)
    assert 1 <= s <= sl.CUDA_GRID_YZ_LIMIT and b <= sl.CUDA_GRID_YZ_LIMIT
    assert n <= b * s < n + s
    assert (s == 1) == (n < sl.CUDA_GRID_YZ_LIMIT)


def test_limits_are_cudas_and_the_kernels():
    assert sl.CUDA_GRID_YZ_LIMIT == 65535 and sl.KERNEL_INT_LIMIT == 2**31 - 1
    assert sl.max_rows(128) == 16777215 and sl.fold(sl.max_rows(128)) == (65281, 257)


def _rotary_shapes(model: onnx.ModelProto, n: int, d: int) -> list[dict[str, tuple]]:
    """Per RotaryEmbedding node, the shapes of its x, position_ids and cos cache at ``n``
    positions (those inputs made graph outputs; onnxruntime CPU)."""
    rotaries = [node for node in model.graph.node if node.op_type == "RotaryEmbedding"]
    names = []
    for node in rotaries:
        if node.domain == "com.microsoft":  # x, position_ids, cos_cache, sin_cache
            names.append((node.input[0], node.input[1], node.input[2]))
        else:  # x, cos_cache, sin_cache, position_ids
            names.append((node.input[0], node.input[3], node.input[1]))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for x, ids, cache in names:
        for name, elem in ((x, TensorProto.FLOAT), (ids, TensorProto.INT64),
                           (cache, TensorProto.FLOAT)):
            if name not in {o.name for o in probe.graph.output}:
                probe.graph.output.append(helper.make_tensor_value_info(name, elem, None))
    outs = run(probe, positions=(np.arange(n, dtype=np.int64) * 7919) % d)
    got = dict(zip([o.name for o in probe.graph.output], outs, strict=True))
    return [{"x": got[x].shape, "ids": got[ids].shape, "cache": got[cache].shape}
            for x, ids, cache in names]


def _within_cuda_grid(shapes: list[dict[str, tuple]]) -> list[str]:
    """What breaks onnxruntime's CUDA launch (``sl.CUDA_GRID_YZ_LIMIT``: com.microsoft's grid is
    (heads, sequence, batch), ONNX's (sequence, batch, heads)) or its input check (sequence <=
    cache rows)."""
    bad = []
    for s in shapes:
        batch, seq = s["x"][0], s["x"][1]
        if batch > sl.CUDA_GRID_YZ_LIMIT or seq > sl.CUDA_GRID_YZ_LIMIT:
            bad.append(f"x {s['x']}: a grid dimension past {sl.CUDA_GRID_YZ_LIMIT}")
        if seq > s["cache"][0]:
            bad.append(f"sequence {seq} longer than the cache's {s['cache'][0]} rows")
        if s["ids"] != (batch, seq):
            bad.append(f"position_ids {s['ids']} for x {s['x']}")
    return bad


@pytest.fixture(scope="module", params=[("rope", "ort", None, "4,4"),
                                        ("sinusoidal", "rotary23", 23, "3,3,2")])
def fused(request):
    scheme, rotary, opset, slices = request.param
    config, module, model = make(scheme, 256, 16, opset=opset,
                                 extra={"rope_lowering": rotary, "slices": slices})
    return config, module, model


@pytest.mark.parametrize("n", [65535, 65536, 262144])
def test_every_rotary_embedding_stays_within_cudas_grid_at_any_n(fused, n):
    """The structural check (module docstring): at N past 65535, every RotaryEmbedding's rows
    are ``[B, S]`` within the grid, its sequence within its cache; and the rows equal, bit for
    bit, those of calls of fewer than 65535 positions (the ``[N, 1]`` form the CPU ran before),
    so folding changed where the rows go, not a value."""
    config, module, model = fused
    shapes = _rotary_shapes(model, n, 256)
    assert len(shapes) == len(sl.plan_of(config)) - 1
    assert not _within_cuda_grid(shapes), _within_cuda_grid(shapes)
    assert shapes[0]["x"][:2] == sl.fold(n)
    p = ((np.arange(n, dtype=np.int64) * 7919) % 511) - 255  # every position, both signs
    whole = run(model, positions=p)[0]
    parts = np.concatenate([run(model, positions=p[i:i + 40000])[0]
                            for i in range(0, n, 40000)])
    assert whole.shape == (n, 16) and np.array_equal(whole, parts)
    assert float(np.abs(whole[:4096] - definition64(module, p[:4096])).max()) <= sl.bound(
        sl.plan_of(config))


def test_the_unfolded_form_is_what_the_structural_check_catches():
    """The check itself: ``[N, 1, d]`` rows (the graph before issue 44) fail it at N = 65536
    and pass at 65535, as onnxruntime-gpu 1.31.1 did on an H200."""
    def old(n):
        return [{"x": (n, 1, 16), "ids": (n, 1), "cache": (512, 8)}]

    assert not _within_cuda_grid(old(65535))
    assert _within_cuda_grid(old(65536)) == ["x (65536, 1, 16): a grid dimension past 65535"]
    assert _within_cuda_grid([{"x": (4, 600, 16), "ids": (4, 600), "cache": (512, 8)}]) == [
        "sequence 600 longer than the cache's 512 rows"]


def test_caches_hold_the_longest_fold_in_memory_not_in_the_file():
    """Every cache is padded (in the graph, from initializers) to the longest sequence a call
    of ``max_rows`` positions folds to; the file stores the slice tables only."""
    config, module, model = make("rope", 4096, 8, extra={"rope_lowering": "ort",
                                                        "slices": "2,2,2,2,2,2"})
    longest = sl.fold(sl.max_rows(8))[1]
    assert longest == 4097
    shapes = _rotary_shapes(model, 5, 4096)
    assert [s["cache"][0] for s in shapes] == [longest] * 5
    stored = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == 1)
    assert stored * 4 < 8 * 2 * 4 * 4 * 6 + 1024  # six 2-bit slices' cos/sin and the low row


@pytest.mark.parametrize("scheme,mode,line", [
    ("rope", None, "ort-cuda: rope --mode compute is the GPU's form: Sin/Cos is cheap on CUDA "
                   "(rope, 65,535 positions on an H200: 68.7 us, where --mode sliced took 256.5 "
                   "and its fused form 231.3); --mode sliced is for targets without Sin/Cos or "
                   "libm"),
    ("sinusoidal", "sliced", "ort-cuda: sinusoidal --mode sliced as asked (--lowering trunc); "
                             "the GPU's form is --mode compute: Sin/Cos is cheap on CUDA"),
    ("gray", None, None)])
def test_target_ort_cuda_says_which_form_it_writes_and_why(tmp_path, scheme, mode, line):
    """Issue 44 point 4: sliced is not the GPU's form; ``--target ort-cuda`` says which form it
    wrote for rope and sinusoidal (and nothing for other schemes or targets)."""
    from typer.testing import CliRunner

    from edgepe import api
    from edgepe.cli import app
    from edgepe.targets import form_note

    args = ["export", "--scheme", scheme, "--max-len", "256", "--target", "ort-cuda",
            *(["--mode", mode] if mode else []), "--out", str(tmp_path / "a.onnx")]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    said = [t for t in done.output.splitlines() if t.startswith("ort-cuda: ")]
    assert (said[0].startswith(line) if line else not said), done.output
    assert form_note(api.make_config(scheme, 256), "ort-cpu") is None
    assert form_note(api.make_config(scheme, 256, mode="table"), "ort-cuda") is None


@pytest.mark.parametrize("scheme,rotary,opset", [("rope", "ort", None),
                                                 ("sinusoidal", "rotary23", 23)])
def test_no_positions_and_one(scheme, rotary, opset):
    """The fold's edges: no positions give ``[0, d]`` (S = 1, nothing padded), one position its
    row."""
    _, module, model = make(scheme, 256, 16, opset=opset, extra={"rope_lowering": rotary,
                                                                 "slices": "4,4"})
    assert run(model, positions=np.zeros(0, np.int64))[0].shape == (0, 16)
    one = run(model, positions=np.array([-200], np.int64))[0]
    assert one.shape == (1, 16)
    assert float(np.abs(one - definition64(module, np.array([-200]))).max()) <= sl.bound((4, 4))
