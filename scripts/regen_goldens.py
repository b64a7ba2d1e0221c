"""Regenerate the golden ONNX graphs in tests/goldens/ (compared byte for byte by the tests).

    .venv/bin/python scripts/regen_goldens.py          # rewrite every golden
    .venv/bin/python scripts/regen_goldens.py --check  # exit 1 if any differs (what CI runs)

Run it after a deliberate change to a graph builder, the manifest or edgepe's version, and review
the diff with ``edgepe inspect tests/goldens/NAME.onnx`` (or ``git diff`` of a C header).
``GOLDENS`` is the list the tests use; ``path(name)`` is where each one lives.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "tests" / "goldens"

# name -> (scheme, max_len, d_model, heads, params, options): small on purpose (a few kB each).
GOLDENS = {
    "binary-L8-d4-seed0": ("binary", 8, 4, None, {}, {}),
    "binary-bits-L8-arith": ("binary-bits", 8, None, None, {}, {"lowering": "arith"}),
    "gray-L16": ("gray", 16, None, None, {}, {}),
    "binary-smooth-L6": ("binary-smooth", 6, None, None, {"c": "3"}, {}),
    "binary-2d-L4-uint8": ("binary-2d", 4, None, None, {}, {"dtype": "uint8"}),
    "integer-norm-L10-d4": ("integer-norm", 10, 4, None, {}, {}),
    "learned-table-L5-d3": ("learned", 5, 3, None, {}, {"mode": "table"}),
    "alibi-table-L4-h2": ("alibi", 4, None, 2, {}, {"mode": "table"}),
    "hierarchical-table-L4": ("hierarchical", 4, None, None, {"widths": "2,1"},
                              {"mode": "table"}),
    "sinusoidal-L8-d4": ("sinusoidal", 8, 4, None, {}, {}),
    "sinusoidal-learned-L4-d4": ("sinusoidal-learned", 4, 4, None, {}, {}),
    "rope-L8-d4": ("rope", 8, 4, None, {}, {}),
    "alibi-L4-h2": ("alibi", 4, None, 2, {}, {}),
    "gaussian-L4": ("gaussian", 4, None, None, {"sigma": "2"}, {}),
    # Every other compute builder, lowering, sliced graph, rope graph and int8 form (issue 33:
    # the mutation run of edgepe/graphs reruns these first, a changed byte fails in milliseconds).
    "integer-L8-d3": ("integer", 8, 3, None, {"C": "3"}, {}),
    "integer-norm-L1-d2-float16": ("integer-norm", 1, 2, None, {}, {"dtype": "float16"}),
    "integer-multiscale-L8-d4": ("integer-multiscale", 8, 4, None, {}, {}),
    "integer-learnable-L8-d4": ("integer-learnable", 8, 4, None, {}, {}),
    "binary-signed-L8": ("binary-signed", 8, None, None, {}, {}),
    "binary-multilevel-L9": ("binary-multilevel", 9, None, None, {"groups": "2"}, {}),
    "hybrid-int-binary-L8": ("hybrid-int-binary", 8, None, None, {}, {}),
    "binary-gated-L8": ("binary-gated", 8, None, None, {}, {}),
    "fourier-binary-L8": ("fourier-binary", 8, None, None, {}, {}),
    "hierarchical-L8": ("hierarchical", 8, None, None, {"widths": "2,1"}, {}),
    "binary-bits-L8-arith32": ("binary-bits", 8, None, None, {}, {"lowering": "arith32"}),
    "binary-bits-L8-float": ("binary-bits", 8, None, None, {}, {"lowering": "float"}),
    "binary-bits-L8-trunc": ("binary-bits", 8, None, None, {}, {"lowering": "trunc"}),
    "binary-sliced-L16": ("binary", 16, 8, None, {}, {"mode": "sliced"}),
    "sinusoidal-sliced-L16-d4": ("sinusoidal", 16, 4, None, {}, {"mode": "sliced"}),
    "sinusoidal-sliced-L16-d4-clip32": ("sinusoidal", 16, 4, None, {"layout": "half"},
                                        {"mode": "sliced", "lowering": "clip32"}),
    "rope-sliced-L16-d4-trunc": ("rope", 16, 4, None, {"layout": "half"},
                                 {"mode": "sliced", "lowering": "trunc"}),
    "rope-sliced-L16-d4-ort": ("rope", 16, 4, None, {}, {"mode": "sliced",
                                                        "extra": {"rope_lowering": "ort"}}),
    # issue 44: two slices, so the angle addition is fused (and the rows folded for CUDA)
    "rope-sliced-L16-d4-ort-2-2": ("rope", 16, 4, None, {}, {
        "mode": "sliced", "extra": {"rope_lowering": "ort", "slices": "2,2"}}),
    "sinusoidal-sliced-L16-d4-rotary23-2-2": ("sinusoidal", 16, 4, None, {"layout": "half"}, {
        "mode": "sliced", "opset": 23, "extra": {"rope_lowering": "rotary23", "slices": "2,2"}}),
    "rope-L8-d4-float16": ("rope", 8, 4, None, {}, {"dtype": "float16"}),
    "rope-L8-d8-half-r4-yarn": ("rope", 8, 8, None, {"layout": "half", "rotary_dim": "4",
                                                     "rope_type": "yarn", "factor": "2",
                                                     "original_max_position_embeddings": "4"},
                                {}),
    "rope-L8-d4-cache": ("rope", 8, 4, None, {}, {"extra": {"rope_graph": "cache"}}),
    "rope-L8-d4-apply": ("rope", 8, 4, None, {}, {"extra": {"rope_graph": "apply"}}),
    "rope-L8-d4-apply-4d-ort": ("rope", 8, 4, None, {}, {"extra": {"rope_graph": "apply-4d",
                                                                  "rope_lowering": "ort"}}),
    "rope-L8-d4-apply-rotary23": ("rope", 8, 4, None, {}, {
        "opset": 23, "extra": {"rope_graph": "apply", "rope_lowering": "rotary23"}}),
    "sinusoidal-L8-d4-half-fairseq": ("sinusoidal", 8, 4, None, {
        "layout": "half", "frequencies": "fairseq", "offset": "2"}, {}),
    "sinusoidal-L8-d4-int8": ("sinusoidal", 8, 4, None, {}, {"quantize": "int8"}),
    "sinusoidal-table-L8-d4-int8-live": ("sinusoidal", 8, 4, None, {}, {
        "mode": "table", "quantize": "int8", "int8_runtime": "live"}),
    "learned-table-L5-d3-int8-tensor": ("learned", 5, 3, None, {}, {
        "mode": "table", "quantize": "int8", "quant_granularity": "tensor"}),
    "gaussian-table-L4": ("gaussian", 4, None, None, {"sigma": "2"}, {"mode": "table"}),
    "binary-2d-table-L6": ("binary-2d", 6, None, None, {}, {"mode": "table"}),
    # issue 40: T5's bucket graph (both directions), its distance table, and mrope's streams
    "t5-bias-L8-h2": ("t5-bias", 8, None, 2, {"num_buckets": "8", "max_distance": "12"}, {}),
    "t5-bias-L8-h2-causal": ("t5-bias", 8, None, 2, {"num_buckets": "8", "max_distance": "12",
                                                    "direction": "causal"}, {}),
    "t5-bias-table-L4-h2": ("t5-bias", 4, None, 2, {"num_buckets": "8", "max_distance": "6"},
                            {"mode": "table"}),
    "mrope-L8": ("mrope", 8, None, None, {"mrope_section": "1,1,2"}, {}),
    "t5-bias-c-table-L4": ("t5-bias", 4, None, 2, {"num_buckets": "8", "max_distance": "6"},
                           {"format": "c", "mode": "table"}),
    # d = 11 past its 2 x 4 bit columns: the Where mask of the columns holding no bit
    "binary-2d-table-L6-d11": ("binary-2d", 6, 11, None, {}, {"mode": "table"}),
    # C headers (--format c): every scheme with a C function, the sliced functions, and tables
    # of each stored dtype, alignment and prefix (edgepe/formats/c.py, c_sliced.py).
    **{f"{scheme}-c-L8": (scheme, 8, 4 if scheme in ("binary", "sinusoidal", "rope") else None,
                          2 if scheme == "alibi" else None, {}, {"format": "c"})
       for scheme in ("binary", "binary-bits", "binary-signed", "binary-smooth", "gray",
                      "binary-multilevel", "hybrid-int-binary", "binary-gated", "fourier-binary",
                      "binary-2d", "hierarchical", "sinusoidal", "rope", "alibi")},
    **{f"{scheme}-c-sliced-L16": (scheme, 16, 4, None, {}, {"format": "c", "mode": "sliced"})
       for scheme in ("binary", "sinusoidal", "rope")},
    "binary-c-sliced-L16-int8": ("binary", 16, 4, None, {}, {
        "format": "c", "mode": "sliced", "quantize": "int8"}),
    "sinusoidal-c-table-L6-d4": ("sinusoidal", 6, 4, None, {}, {"format": "c", "mode": "table"}),
    "gray-c-table-L8-bit": ("gray", 8, None, None, {}, {"format": "c", "mode": "table",
                                                         "dtype": "bit"}),
    "binary-bits-c-table-L8-uint8-a64": ("binary-bits", 8, None, None, {}, {
        "format": "c", "mode": "table", "dtype": "uint8", "c_align": 64, "c_prefix": "my_pe"}),
    "learned-c-table-L5-d3-int8": ("learned", 5, 3, None, {}, {
        "format": "c", "mode": "table", "quantize": "int8"}),
    "gaussian-c-table-L4": ("gaussian", 4, None, 2, {"sigma": "2"}, {"format": "c",
                                                                    "mode": "table"}),
    # the C compute variants with their own branches (formats/c.py: half layout and offset,
    # yarn's attention factor over more than 8 columns, d/2 = 0 and L - 1 = 1, one int8 scale)
    "sinusoidal-c-L8-d4-half-fairseq": ("sinusoidal", 8, 4, None, {
        "layout": "half", "frequencies": "fairseq", "offset": "2"}, {"format": "c"}),
    "rope-c-L8-d20-half-yarn": ("rope", 8, 20, None, {
        "layout": "half", "rope_type": "yarn", "factor": "2",
        "original_max_position_embeddings": "4"}, {"format": "c"}),
    "hybrid-int-binary-c-L2-d1": ("hybrid-int-binary", 2, 1, None, {}, {"format": "c"}),
    "binary-c-L8-int8-tensor": ("binary", 8, 4, None, {}, {
        "format": "c", "quantize": "int8", "quant_granularity": "tensor"}),
}
EXTENSIONS = {"onnx": ".onnx", "c": ".h"}


def path(name: str) -> Path:
    """The golden file of ``name`` (its format's extension)."""
    return GOLDEN_DIR / f"{name}{EXTENSIONS[GOLDENS[name][5].get('format', 'onnx')]}"


def golden_bytes(name: str) -> bytes:
    """The ONNX bytes edgepe exports today for golden ``name`` (in memory, seed 0)."""
    from edgepe import api
    from edgepe.export import prepare

    scheme, max_len, d_model, heads, params, options = GOLDENS[name]
    config = api.make_config(scheme, max_len, d_model=d_model, heads=heads, params=params,
                             **options)
    buffer = io.BytesIO()
    prepare(config).write(buffer)
    return buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a diff")
    args = parser.parse_args()
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    differ = []
    for name in GOLDENS:
        path_ = path(name)
        data = golden_bytes(name)
        if path_.exists() and path_.read_bytes() == data:
            continue
        differ.append(name)
        if not args.check:
            path_.write_bytes(data)
    kept = {path(name) for name in GOLDENS}
    stale = sorted(p for p in GOLDEN_DIR.iterdir() if p.is_file() and p not in kept)
    for old in stale:
        if not args.check:
            old.unlink()
    verb = "differ" if args.check else "rewritten"
    print(f"{len(GOLDENS)} goldens, {len(differ)} {verb}: {', '.join(differ) or '-'}; "
          f"stale: {', '.join(p.name for p in stale) or '-'}")
    return 1 if args.check and (differ or stale) else 0


if __name__ == "__main__":
    sys.exit(main())
