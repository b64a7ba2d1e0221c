"""Every documented default, pinned against a literal (issue 24).

The defaults are what users get with no flags (DESIGN.md's catalogue, docs/readme/catalogue.md,
``edgepe list``). Each is checked twice: ``resolve`` fills in the documented value, and the
module built from that default computes what the documented value gives, written here as
literal float64 numbers (``math`` by hand, not edgepe), so a changed default fails even where a
test reads the value back from the registry. The catalogue doc's parameter and width columns are
parsed and checked against the registry, so doc and code cannot drift apart.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from edgepe.cli import app
from edgepe.contract.config import ExportConfig
from edgepe.schemes import build, get_spec, resolve, scheme_ids

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (1, 2, 37, 1000)


def n_of(max_len: int) -> int:
    """``ceil(log2(L + 1))``, the demo's bit count (1 for L = 1)."""
    return max(1, (max_len).bit_length())


# scheme -> (params, default d_model as f(n), heads): DESIGN.md's "parameters (default)" column.
DEFAULTS = {
    "binary": ({"dropout": 0.0}, lambda n: 64, None),
    "binary-bits": ({}, lambda n: n, None),
    "binary-signed": ({}, lambda n: n, None),
    "binary-smooth": ({"c": 5.0}, lambda n: n, None),
    "gray": ({}, lambda n: n, None),
    "binary-multilevel": ({"groups": 3}, lambda n: 3 * n, None),
    "integer": ({"C": "max_len"}, lambda n: 64, None),
    "integer-norm": ({}, lambda n: 64, None),
    "integer-multiscale": ({"alpha": 1.0}, lambda n: 64, None),
    "integer-learnable": ({}, lambda n: 64, None),
    "hybrid-int-binary": ({}, lambda n: 2 * n, None),
    "binary-gated": ({}, lambda n: n, None),
    "fourier-binary": ({}, lambda n: 2 * n, None),
    "binary-2d": ({}, lambda n: 2 * n, None),
    "hierarchical": ({"widths": "3 x n"}, lambda n: 3 * n, None),
    "sinusoidal": ({"base": 10000.0, "layout": "interleaved", "frequencies": "base", "offset": 0,
                    "freq_dtype": "float64"}, lambda n: 64, None),
    "learned": ({"offset": 0}, lambda n: 64, None),
    "sinusoidal-learned": ({"base": 10000.0}, lambda n: 64, None),
    "rope": ({"base": 10000.0, "layout": "interleaved", "rotary_dim": 0, "rope_type": "default",
              "factor": 1.0, "original_max_position_embeddings": "L", "seq_len": "L",
              "low_freq_factor": 1.0, "high_freq_factor": 4.0, "beta_fast": 32.0,
              "beta_slow": 1.0, "attention_factor": 0.0, "freq_dtype": "float64",
              "short_factor": (), "long_factor": ()}, lambda n: 64, None),
    "alibi": ({"slopes": "paper"}, None, 8),
    "gaussian": ({"sigma": 8.0}, None, 1),
    "t5-bias": ({"num_buckets": 32, "max_distance": 128, "direction": "bidirectional"}, None, 8),
    "mrope": ({"base": 1000000.0, "mrope_section": (16, 24, 24)}, lambda n: 128, None),
}


def test_every_registered_scheme_has_its_defaults_pinned():
    assert set(DEFAULTS) == set(scheme_ids())


@pytest.mark.parametrize("scheme", list(DEFAULTS))
def test_resolve_fills_the_documented_defaults(scheme):
    params, width, heads = DEFAULTS[scheme]
    for max_len in LENGTHS:
        n = n_of(max_len)
        # "max_len": the float C = max_len; "L": an integer max_len (rope's HF lengths)
        expected = {k: {"max_len": float(max_len), "L": max_len, "3 x n": (n, n, n)}.get(v, v)
                    for k, v in params.items()}
        cfg = resolve(scheme, max_len)
        assert dict(cfg.params) == expected, (scheme, max_len)
        assert [type(v) for v in cfg.params.values()] == [type(v) for v in expected.values()]
        assert cfg.d_model == (None if width is None else width(n)), (scheme, max_len)
        assert cfg.heads == heads


def test_default_modes():
    """``--mode compute`` wherever a scheme has one; ``learned`` is a table only."""
    assert {s: get_spec(s).default_mode for s in scheme_ids()} == {
        s: "table" if s == "learned" else "compute" for s in scheme_ids()}


def _encode(scheme, max_len, positions, keys=None, **kw):
    module = build(resolve(scheme, max_len, **kw))
    with torch.no_grad():
        p = torch.tensor(positions, dtype=torch.int64)
        out = module.encode(p) if keys is None else module.encode(p, torch.tensor(keys))
    return out.numpy().astype(np.float64)


def test_binary_smooth_default_c_is_5():
    # sigmoid(5) = 1 / (1 + e^-5) and sigmoid(-5); torch's float32 sigmoid is within one ulp
    hi, lo = 0.9933071490757153, 0.0066928509242848554
    got = _encode("binary-smooth", 3, [0, 1, 2, 3])  # n = 2
    np.testing.assert_allclose(got, [[lo, lo], [hi, lo], [lo, hi], [hi, hi]], rtol=0, atol=1.2e-7)


def test_gaussian_default_sigma_is_8():
    # -(t - u)^2 / (2 * 8^2) = -(t - u)^2 / 128
    got = _encode("gaussian", 20, [0], [0, 4, 8, 16])
    np.testing.assert_array_equal(got, [[[0.0, -0.125, -0.5, -2.0]]])


def test_integer_multiscale_default_alpha_is_1():
    # x(4) = 4 / (5 - 1) = 1, times (i / 4)^1
    got = _encode("integer-multiscale", 5, [4], d_model=5)
    np.testing.assert_array_equal(got, [[0.0, 0.25, 0.5, 0.75, 1.0]])


def test_integer_default_c_is_max_len():
    np.testing.assert_array_equal(_encode("integer", 8, [2], d_model=2), [[0.25, 0.25]])


def test_multilevel_default_groups_is_3():
    # L = 15: n = 4, d = 12; group g holds bits g .. g + 3 of 13 = 0b1101 (DESIGN.md, guide 3.7)
    got = _encode("binary-multilevel", 15, [13])
    np.testing.assert_array_equal(got, [[1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0]])


@pytest.mark.parametrize("scheme", ["sinusoidal", "sinusoidal-learned", "rope"])
def test_default_base_is_10000(scheme):
    """Position 1, d = 4: angles 1 and 10000^(-2/4) = 0.01."""
    s1, c1 = 0.8414709848078965, 0.5403023058681398  # sin(1), cos(1)
    s2, c2 = 0.009999833334166664, 0.9999500004166653  # sin(0.01), cos(0.01)
    module = build(resolve(scheme, 4, d_model=4))
    if scheme == "sinusoidal-learned":
        with torch.no_grad():
            module.residual.zero_()
    with torch.no_grad():
        got = module.encode(torch.tensor([1])).numpy().astype(np.float64)
    expected = [c1, c2, s1, s2] if scheme == "rope" else [s1, c1, s2, c2]
    np.testing.assert_allclose(got, [expected], rtol=0, atol=1e-6)


def test_alibi_default_heads_is_8():
    # m_h = 2^(-8 (h + 1) / 8) = 2^-(h + 1): slopes 1/2 .. 1/256, times |0 - 1|
    got = _encode("alibi", 4, [0], [1])
    np.testing.assert_array_equal(got.reshape(-1), [-(2.0 ** -(h + 1)) for h in range(8)])


def test_gaussian_default_heads_is_1():
    assert _encode("gaussian", 4, [0, 1], [0]).shape == (1, 2, 1)


def test_t5_bias_defaults_are_t5s_32_buckets_up_to_128_bidirectional():
    """Row b of the embedding set to b: the bias is the bucket. 16 buckets a direction, 8
    exact, then ``8 + floor(ln(a / 8) / ln(128 / 8) * 8)`` (90 -> 14, 91 -> 15), later keys
    16 on; 8 heads."""
    module = build(resolve("t5-bias", 4))
    with torch.no_grad():
        module.relative_attention_bias.weight.copy_(
            torch.arange(32, dtype=torch.float32)[:, None].expand(32, 8))
        got = module.encode(torch.tensor([200]), torch.tensor(
            [200, 199, 192, 188, 110, 109, 72, 0, 201, 300])).numpy()
    assert got.shape == (8, 1, 10)
    np.testing.assert_array_equal(got[0, 0], [0, 1, 8, 9, 14, 15, 15, 15, 17, 31])


def test_mrope_defaults_are_qwen2_vls():
    """base 1e6, sections 16, 24, 24 of d = 128: at (t, h, w) = (1, 2, 3) slot 0 turns by
    1, slot 16 by 2 * 1e6^(-32/128), slot 40 by 3 * 1e6^(-80/128) (float32 frequencies: 1e-6)."""
    got = _encode("mrope", 4, [[1, 2, 3]])
    assert got.shape == (1, 128)
    for slot, angle in ((0, 1.0), (15, 1e6 ** (-30 / 128)), (16, 2 * 1e6 ** (-32 / 128)),
                        (39, 2 * 1e6 ** (-78 / 128)), (40, 3 * 1e6 ** (-80 / 128)),
                        (63, 3 * 1e6 ** (-126 / 128))):
        assert abs(got[0, slot] - math.cos(angle)) <= 1e-6, slot
        assert abs(got[0, 64 + slot] - math.sin(angle)) <= 1e-6, slot


def test_learnable_inits_are_the_documented_ones():
    """integer-learnable w = 1, b = 0; binary-gated logits 0 (gates 1/2)."""
    np.testing.assert_array_equal(_encode("integer-learnable", 5, [2], d_model=3),
                                  [[0.5, 0.5, 0.5]])
    # L = 3, n = 2: position 1 has bits [1, 0]; 0.5 b + 0.5 x(1), x(1) = 1/2
    np.testing.assert_array_equal(_encode("binary-gated", 3, [1]), [[0.75, 0.25]])


def test_default_seed_is_0_and_init_is_the_demos():
    """``build`` without a seed draws the demo's ``Linear(n, d, bias=False)`` after
    ``torch.manual_seed(0)`` (the demo creates no other parameter first)."""
    torch.manual_seed(0)
    demo = torch.nn.Linear(6, 64, bias=False).weight.detach()
    module = build(resolve("binary", 37))
    assert torch.equal(module.projection.weight.detach(), demo)
    assert ExportConfig(resolve("binary", 37)).seed == 0


def test_cli_export_with_no_flags_writes_the_documented_defaults(tmp_path, monkeypatch):
    """``edgepe export --scheme binary --max-len 512``: compute, onnx, float32, no quant, seed
    0, d_model 64, opset 18, under models/; the graph computes bits @ W^T with the seed-0 W."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["export", "--scheme", "binary", "--max-len", "512",
                                      "--no-verify"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "models" / "binary-compute-L512-d64.onnx"
    manifest = json.loads(Path(f"{out}.json").read_text())
    assert (manifest["mode"], manifest["format"], manifest["dtype"]) == (
        "compute", "onnx", "float32")
    assert manifest["quant"] is None and manifest["d_model"] == 64
    assert manifest["params"] == {"dropout": 0.0} and manifest["inputs"]["seed"] == 0
    assert manifest["onnx"]["opset"] == 18 and manifest["shape"][-1] == 64
    torch.manual_seed(0)
    w = torch.nn.Linear(10, 64, bias=False).weight.detach().numpy().astype(np.float64)
    positions = np.array([0, 1, 2, 5, 511], dtype=np.int64)
    bits = (positions[:, None] >> np.arange(10)) & 1
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"positions": positions})[0]
    np.testing.assert_allclose(got, bits @ w.T, rtol=1e-6, atol=1e-6)


# -- docs/readme/catalogue.md's parameter and width columns against the registry -----------

CATALOGUE = ROOT / "docs" / "readme" / "catalogue.md"
# The width column's words, as functions of (n, params).
WIDTH_WORDS = {"`n`": lambda n: n, "`2n`": lambda n: 2 * n, "`groups * n`": lambda n: 3 * n,
               "`sum(widths)`": lambda n: 3 * n}


def catalogue_rows() -> dict[str, list[str]]:
    rows = {}
    for line in CATALOGUE.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 7 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_catalogue_doc_lists_every_scheme():
    assert list(catalogue_rows()) == scheme_ids()


@pytest.mark.parametrize("scheme", scheme_ids())
def test_catalogue_doc_parameter_column_matches_the_registry(scheme):
    cells = catalogue_rows()[scheme]
    documented = {k: v.strip("`") if v.startswith("`") and v.endswith("`") else v
                  for k, v in re.findall(r"`(--heads|\w+)` \((`[^`]*`|[^,;)]+)", cells[3])}
    spec = get_spec(scheme)
    cfg = resolve(scheme, 37)
    expected = {}
    # rope's row lists its own parameters and says "and its HF parameters": those are in the
    # conventions table below it, each by name.
    elsewhere = "and its HF parameters" in cells[3]
    for p in spec.params:
        value = cfg.params[p.name]
        if elsewhere and p.name not in documented:
            assert re.search(rf"\b{p.name}\b", CATALOGUE.read_text()), p.name
            continue
        if callable(p.default):
            expected[p.name] = {"C": "L", "widths": "3 levels of `n` bits"}[p.name]
        else:
            expected[p.name] = value
    if "rotary_dim" in documented:  # "(0 = d)": the number before the explanation
        documented["rotary_dim"] = documented["rotary_dim"].split(" ")[0]
    if spec.heads is not None:
        expected["--heads"] = spec.heads
    parsed = {k: (v if isinstance(expected.get(k), str) else
                  tuple(int(x) for x in v.split(",")) if isinstance(expected.get(k), tuple)
                  else type(expected.get(k, 0.0))(float(v))) for k, v in documented.items()}
    assert parsed == expected, (cells[3], expected)
    width = cells[4].split(" ")[0] if not cells[4].startswith("`") else cells[4].split(" (")[0]
    if spec.d_model is None:
        assert cells[4].startswith("-") and cfg.d_model is None
    elif width in WIDTH_WORDS:
        assert cfg.d_model == WIDTH_WORDS[width](cfg.n_bits)
    else:
        assert cfg.d_model == int(width)


def test_edgepe_list_shows_the_documented_defaults():
    """``edgepe list``'s parameter and width columns, as DESIGN.md's catalogue prints them."""
    result = CliRunner().invoke(app, ["list", "--wide"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows: dict[str, list[str]] = {}
    for line in result.output.splitlines():
        if line.count("│") != 8:
            continue
        first, *cells = [c.strip() for c in line.split("│")[1:-1]]
        if first:
            rows[first] = cells
        else:  # a wrapped row: its cells continue the previous row's
            last = rows[list(rows)[-1]]
            rows[list(rows)[-1]] = [f"{a} {b}".strip() for a, b in zip(last, cells, strict=True)]
    shown = {scheme: (cells[1], cells[2]) for scheme, cells in rows.items()}
    assert shown == {
        "binary": ("dropout (0.0)", "64"), "binary-bits": ("-", "derived"),
        "binary-signed": ("-", "derived"), "binary-smooth": ("c (5.0)", "derived"),
        "gray": ("-", "derived"), "binary-multilevel": ("groups (3)", "derived"),
        "integer": ("C (max_len)", "64"), "integer-norm": ("-", "64"),
        "integer-multiscale": ("alpha (1.0)", "64"), "integer-learnable": ("-", "64"),
        "hybrid-int-binary": ("-", "derived"), "binary-gated": ("-", "derived"),
        "fourier-binary": ("-", "derived"), "binary-2d": ("-", "derived"),
        "hierarchical": ("widths (3 levels of n bits)", "derived"),
        "sinusoidal": ("base (10000.0), layout (interleaved), frequencies (base), offset (0), "
                       "freq_dtype (float64)", "64"), "learned": ("offset (0)", "64"),
        "sinusoidal-learned": ("base (10000.0)", "64"),
        "rope": ("base (10000.0), layout (interleaved), rotary_dim (0), rope_type (default), "
                 "factor (1.0), original_max_position_embeddings (max_len), seq_len (max_len), "
                 "low_freq_factor (1.0), high_freq_factor (4.0), beta_fast (32.0), beta_slow "
                 "(1.0), attention_factor (0.0), freq_dtype (float64), short_factor (none), "
                 "long_factor (none)", "64"),
        "alibi": ("slopes (paper)", "heads 8"), "gaussian": ("sigma (8.0)", "heads 1"),
        "t5-bias": ("num_buckets (32), max_distance (128), direction (bidirectional)",
                    "heads 8"),
        "mrope": ("base (1000000.0), mrope_section (16,24,24)", "derived"),
    }
