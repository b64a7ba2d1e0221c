"""C headers of ``--mode sliced`` (``--format c``): a row from bit slices and small tables.

rope and sinusoidal: ``static inline void {base}_encode(int64_t pos, float out[D])`` computes
one row without libm (no ``sinf``/``cosf``: ``nm`` of a program using it shows no such symbol),
from the float32 slice tables of ``edgepe.graphs.sliced`` (float64 angles, stored
float32, yarn's attention factor folded into the top slice) by angle addition, in the ONNX
graph's arithmetic order: ``c' = t_c c - t_s s``, ``s' = t_s c + t_c s`` slice by slice, the sign
of ``sin`` flipped for negative positions. Within ``graphs.sliced.bound`` of the float64
definition when compiled without FP contraction (``-std=c99`` turns it off in GCC; with FMA the
error only shrinks: one rounding fewer per product pair). Defined for ``|pos|`` below the plan's
``2^bits`` (the manifest's ``positions.limit``); past it the slices wrap (no read out of bounds).

binary (the demo): ``PE(pos) = sum_c T_c[(p >> k_c) & m_c]`` with ``p = pos mod 2^n`` (two's
complement, as the reference wraps) and ``T_c[s]`` the sum of the projection rows of the bits
set in ``s``: float32 tables summed from float64 (within the scheme's tolerance), or with
``--quantize int8`` exact int16 sums of the int8 projection (``edgepe.graphs.quant``'s, the one the
compute header holds) and one float32 multiply by the column's scale: bit for bit the int8
compute header's result (the same int32 sum), so its proven bound holds unchanged.
"""

from __future__ import annotations

import hashlib
from typing import BinaryIO

import numpy as np

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import BadParameterError
from edgepe.formats.c import (
    _attribute,
    _closing,
    _opening,
    _quant_constants,
    _weights,
    c_rows,
    names,
)
from edgepe.formats.onnx import output_shape
from edgepe.graphs import sliced

SCHEMES = ("rope", "sinusoidal", "binary")


def _names(config: ExportConfig) -> dict[str, str]:
    """The compute header's names with ``_sliced``: both headers include side by side."""
    n = names(config)
    base = f"{n['base']}_sliced"
    return {"base": base, "macro": base.upper(), "guard": f"{base.upper()}_ENCODE_H"}


def check(config: ExportConfig) -> None:
    if config.scheme.scheme not in SCHEMES:
        raise BadParameterError(f"--format c --mode sliced has a function for "
                                f"{', '.join(SCHEMES)}; scheme '{config.scheme.scheme}' has none")
    if config.lowering != "bitwise":
        raise BadParameterError(f"--lowering {config.lowering} chooses the ops of an ONNX graph; "
                                "a C header slices with C's shifts and masks: drop --lowering")
    if config.dtype != "float32":
        raise BadParameterError(f"C sliced functions write float32 (--dtype float32), got "
                                f"--dtype {config.dtype}")
    if config.quantize != "none" and config.scheme.scheme != "binary":
        raise BadParameterError("--quantize int8 applies to a C sliced function only for "
                                "'binary' (its projection); rope and sinusoidal store float32 "
                                "tables")


def prepare(config: ExportConfig, module) -> Prepared:
    check(config)
    if config.scheme.scheme == "binary":
        return _binary(config, module)
    return _trig(config, module)


def _guarded_opening(config: ExportConfig, what: str, lines: list[str]) -> str:
    text = _opening(config, what, lines)
    old, new = names(config)["guard"], _names(config)["guard"]
    return text.replace(old, new)


def _closing_sliced(config: ExportConfig, what: str, digest: str, size: int) -> str:
    return _closing(config, what, digest, size).replace(names(config)["guard"],
                                                        _names(config)["guard"])


def _table_c(macro: str, symbol: str, values: np.ndarray, ctype: str) -> str:
    rows, cols = values.shape
    return (f"static {macro}_ATTR const {ctype} {symbol}[{rows}][{cols}] = {{\n"
            f"{c_rows(values)}}};\n")


def _trig(config: ExportConfig, module) -> Prepared:
    s = config.scheme
    n = _names(config)
    macro, base = n["macro"], n["base"]
    function = f"{base}_encode"
    widths = sliced.plan_of(config)
    inv_freq = module.inv_freq.detach().numpy().astype(np.float32)
    scaled = bool(getattr(module, "scaled", False))
    scale = module.scale.detach().numpy().astype(np.float32) if scaled else None
    attention = float(scale.max()) if scaled else 1.0
    tables = sliced.slice_tables(inv_freq, widths, scale)  # least significant first
    half = len(inv_freq)
    manifest = {
        **base_manifest(config, output_shape(config), "float32"),
        "symbol": f"{base}_cos0",
        "symbol_shape": [int(1 << widths[-1]), half],
        "symbol_dtype": "float32",
        "accessor": None,
        "function": function,
        "macro_prefix": macro,
        "byte_order": "little",
    }
    sliced._record(config, manifest, widths, attention)
    low_first = list(reversed(widths))
    shifts = np.cumsum([0, *low_first[:-1]]).tolist()
    total = sum(widths)
    rope = s.scheme == "rope"
    half_layout = not rope and module.layout == "half"  # sinusoidal [sin | cos] (Marian)
    offset = 0 if rope else int(module.offset)  # sinusoidal's fairseq padding offset
    layout = (f"out[i] = cos(a_i), out[{macro}_HALF + i] = sin(a_i)" if rope
              else f"out[i] = sin(a_i), out[{macro}_HALF + i] = cos(a_i)" if half_layout
              else "out[2i] = sin(a_i), out[2i + 1] = cos(a_i)")
    lines = [
        f"{function}: one position's row without libm (no sinf/cosf): out[{s.d_model}] float32,",
        f"{layout}, a_i = {f'(pos + {offset})' if offset else 'pos'} * w_i, from bit slices "
        f"of |pos| (widths {list(widths)}, most",
        "significant first) and float32 tables of their cos/sin computed in float64, combined",
        "by angle addition. Max abs error against the float64 definition "
        f"<= {sliced.bound(widths, attention):.4g}",
        f"(graphs.sliced.bound; any position). Defined for |pos| < 2^{total}; past it the "
        "slices wrap.",
    ]
    store = (f"        out[i] = c;\n        out[{macro}_HALF + i] = sn;\n" if rope
             else f"        out[i] = sn;\n        out[{macro}_HALF + i] = c;\n" if half_layout
             else "        out[2 * i] = sn;\n        out[2 * i + 1] = c;\n")
    index_lines = []
    for c, (k, w) in enumerate(zip(shifts, low_first, strict=True)):
        index_lines.append(f"    const uint32_t s{c} = (uint32_t)((a >> {k}) & {(1 << w) - 1}u);")
    body = [
        *([f"    pos += {offset};  /* the fairseq padding offset */"] if offset else []),
        "    const uint64_t u = (uint64_t)pos;  /* two's complement */",
        "    const int neg = pos < 0;",
        "    const uint64_t a = neg ? (uint64_t)0 - u : u;  /* |pos|, no overflow */",
        *index_lines,
        "    uint32_t i;",
        f"    for (i = 0; i < {macro}_HALF; ++i) {{",
    ]
    top = len(low_first) - 1
    if top == 0:
        body += [f"        const float c = {base}_cos0[s0][i];",
                 f"        const float sn = neg ? -{base}_sin0[s0][i] : {base}_sin0[s0][i];"]
    else:
        body += [f"        float c = {base}_cos0[s0][i], sl = {base}_sin0[s0][i];"]
        for c in range(1, top):
            body += [f"        {{ const float tc = {base}_cos{c}[s{c}][i], "
                     f"ts = {base}_sin{c}[s{c}][i];",
                     "          const float nc = tc * c - ts * sl;",
                     "          sl = ts * c + tc * sl; c = nc; }"]
        body += [f"        const float hc = {base}_cos{top}[s{top}][i], "
                 f"hs = {base}_sin{top}[s{top}][i];",
                 "        const float c2 = hc * c - hs * sl;",
                 "        const float s2 = hs * c + hc * sl;",
                 "        const float sn = neg ? -s2 : s2;",
                 "        c = c2;"]
    body += [store.rstrip("\n"), "    }"]
    data = b"".join(np.ascontiguousarray(t, "<f4").tobytes() for pair in tables for t in pair)

    def write(f: BinaryIO) -> None:
        f.write(_guarded_opening(config, f"{s.scheme} sliced function", lines).encode())
        f.write(f"#define {macro}_D {s.d_model}\n#define {macro}_HALF {half}\n\n".encode())
        f.write(_attribute(f"{macro}_ATTR", config.c_align).encode())
        for c, (cos, sin) in enumerate(tables):
            f.write(_table_c(macro, f"{base}_cos{c}", cos, "float").encode())
            f.write(_table_c(macro, f"{base}_sin{c}", sin, "float").encode())
        f.write(f"\nstatic inline void {function}(int64_t pos, float out[{macro}_D])\n{{\n"
                .encode())
        f.write(("\n".join(body) + "\n}\n").encode())
        f.write(_closing_sliced(config, "the slice tables (cos0, sin0, cos1, ...)",
                                hashlib.sha256(data).hexdigest(), len(data)).encode())

    return Prepared(manifest, write)


def _binary(config: ExportConfig, module) -> Prepared:
    s = config.scheme
    n = _names(config)
    macro, base = n["macro"], n["base"]
    function = f"{base}_encode"
    widths = sliced.binary_plan(config)
    low_first = list(reversed(widths))
    weights, quant = _weights(config, module, f"{base}_t0")
    integer = quant is not None
    tables = sliced.binary_tables(weights, low_first, integer)
    if integer and max(int(np.abs(t).max()) for t in tables) > 32767:  # cannot: 16 x 127 max
        raise BadParameterError("slice sums do not fit int16: use narrower --slices")
    ctype = "int16_t" if integer else "float"
    manifest = {
        **base_manifest(config, output_shape(config), "float32"),
        "quant": quant,
        "symbol": f"{base}_t0",
        "symbol_shape": list(tables[0].shape),
        "symbol_dtype": str(tables[0].dtype),
        "accessor": None,
        "function": function,
        "macro_prefix": macro,
        "n_bits": s.n_bits,
        "byte_order": "little",
        "sliced": {"slices": [int(w) for w in widths],
                   "shifts": np.cumsum([0, *low_first[:-1]])[::-1].tolist(),
                   "table_bytes": int(sum(t.nbytes for t in tables))},
    }
    shifts = np.cumsum([0, *low_first[:-1]]).tolist()
    reads = " + ".join(f"{base}_t{c}[s{c}][j]" for c in range(len(low_first)))
    index_lines = [f"    const uint32_t s{c} = (uint32_t)((u >> {k}) & {(1 << w) - 1}u);"
                   for c, (k, w) in enumerate(zip(shifts, low_first, strict=True))]
    if integer:
        scale = "j" if quant["axis"] is not None else "0"
        row = (f"        out[j] = {base}_t0_scale[{scale}] * (float)((int32_t){reads});")
    else:
        row = f"        out[j] = {reads};"
    body = ["    const uint64_t u = (uint64_t)pos;  /* two's complement: pos mod 2^64 */",
            *index_lines, "    uint32_t j;",
            f"    for (j = 0; j < {macro}_D; ++j) {{", row, "    }"]
    lines = [
        f"{function}: one position's row from {len(widths)} bit slices of p = pos mod 2^n "
        f"(widths {list(widths)},",
        f"most significant first): out[{s.d_model}] float32 = sum_c T_c[(p >> k_c) & m_c], "
        "T_c[s] the sum of the",
        "projection rows of the bits set in s"
        + (" (int16: exact int8 sums; one float32 multiply by the column's scale, bit for bit "
           "the int8 compute header)." if integer else " (float64 sums, stored float32)."),
        "Every int64 position is defined, as in the reference (two's complement wrap).",
    ]
    data = b"".join(np.ascontiguousarray(t, t.dtype.newbyteorder("<")).tobytes()
                    for t in tables)

    def write(f: BinaryIO) -> None:
        f.write(_guarded_opening(config, "binary sliced function", lines).encode())
        f.write(f"#define {macro}_D {s.d_model}\n#define {macro}_N_BITS {s.n_bits}\n\n".encode())
        f.write(_attribute(f"{macro}_ATTR", config.c_align).encode())
        if integer:
            value = "out[c] = {scale} * (sum of the slices' int16 sums)"
            f.write(_quant_constants(macro, f"{base}_t0", quant, value).encode())
        for c, t in enumerate(tables):
            f.write(_table_c(macro, f"{base}_t{c}", t, ctype).encode())
        f.write(f"\nstatic inline void {function}(int64_t pos, float out[{macro}_D])\n{{\n"
                .encode())
        f.write(("\n".join(body) + "\n}\n").encode())
        f.write(_closing_sliced(config, "the slice tables (t0, t1, ...)",
                                hashlib.sha256(data).hexdigest(), len(data)).encode())

    return Prepared(manifest, write)
