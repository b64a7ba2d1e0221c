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
compute header's result (the same int32 sum), so its proven bound holds unchanged. The int8
tables are stored two columns to a ``uint32_t`` word (``pack_lanes``), each table biased so that
no lane ever carries into the next: a pair of columns sums in one 32-bit add per slice. Beside
``encode``, ``{base}_encode_q(pos, int16_t out[D])`` writes those exact sums, the codes whose
scale is ``{base}_t0_scale`` (``scale[c] * out[c]`` is ``encode``'s value, bit for bit): what an
int8 pipeline (CMSIS-NN) adds to its activations, without the int-to-float conversion and
multiply that cost the float row about as many instructions again (docs/readme/sliced.md has
the Cortex-M4F figures).
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
    # the header's tables (no extra top row: C reads |pos|'s slices and flips the sign itself,
    # where _record counts the bitwise ONNX graph's negative row)
    manifest["sliced"]["table_bytes"] = int(sum(t.nbytes for pair in tables for t in pair))
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
    head = ["    const uint64_t u = (uint64_t)pos;  /* two's complement */",
            "    const int neg = pos < 0;"]
    if offset:  # pos + offset in uint64, mod 2^64 as the reference's int64 add wraps: a signed
        # add would overflow (undefined behaviour) at int64's ends
        head = [f"    const uint64_t u = (uint64_t)pos {'+' if offset > 0 else '-'} "
                f"(uint64_t){abs(offset)};  /* plus the fairseq padding offset */",
                "    const int neg = (int)(u >> 63);  /* the sign of pos + offset */"]
    body = [
        *head,
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


LANE_BIAS = 0x8000  # every pair of lanes sums to (int16 sum + 0x8000): XOR 0x80008000 signs it


def pack_lanes(tables: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
    """The int16 slice tables as ``uint32`` words of two columns (column ``2i`` in the low half,
    ``2i + 1`` in the high; an odd last column alone), each table biased by ``b_c`` so that
    every stored lane is in ``[0, 65535]`` and the lanes of a sum over the slices add to
    ``sum_c T_c + 0x8000`` with no carry between them: ``b_c = max|T_c|`` for ``c >= 1`` and
    ``b_0 = 0x8000 - sum(b_c)``. The sum of int8 projections of n <= 64 bits is within
    ``64 * 127 = 8128`` of 0, so the lanes stay inside 16 bits whatever the plan."""
    wide = [t.astype(np.int64) for t in tables]  # |int16| and sums of them overflow int16
    biases = [int(np.abs(t).max()) for t in wide[1:]]
    biases = [LANE_BIAS - sum(biases), *biases]
    total = sum(np.abs(t).max(axis=0) for t in wide)
    if biases[0] < int(np.abs(wide[0]).max()) or int(total.max()) + LANE_BIAS > 0xFFFF:
        raise BadParameterError("the slice sums do not fit two 16-bit lanes: use more, "
                                "narrower --slices")
    packed = []
    for t, b in zip(wide, biases, strict=True):
        u = t + b
        if u.shape[1] % 2:
            u = np.concatenate([u, np.full((len(u), 1), b, np.int64)], axis=1)
        packed.append((u[:, 0::2] | (u[:, 1::2] << 16)).astype(np.uint32))
    return packed, biases


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
    biases: list[int] = []
    if integer:
        tables, biases = pack_lanes(tables)
    ctype = "uint32_t" if integer else "float"
    manifest = {
        **base_manifest(config, output_shape(config), "float32"),
        "quant": quant,
        "symbol": f"{base}_t0",
        "symbol_shape": list(tables[0].shape),
        "symbol_dtype": str(tables[0].dtype),
        "accessor": None,
        "function": function,
        **({"codes_function": f"{function}_q"} if integer else {}),
        "macro_prefix": macro,
        "n_bits": s.n_bits,
        "byte_order": "little",
        "sliced": {"slices": [int(w) for w in widths],
                   "shifts": np.cumsum([0, *low_first[:-1]])[::-1].tolist(),
                   "table_bytes": int(sum(t.nbytes for t in tables)),
                   **({"lane_biases": biases} if integer else {})},
    }
    shifts = np.cumsum([0, *low_first[:-1]]).tolist()
    index_lines = [f"    const uint32_t s{c} = (uint32_t)((u >> {k}) & {(1 << w) - 1}u);"
                   for c, (k, w) in enumerate(zip(shifts, low_first, strict=True))]
    lines = [
        f"{function}: one position's row from {len(widths)} bit slices of p = pos mod 2^n "
        f"(widths {list(widths)},",
        f"most significant first): out[{s.d_model}] float32 = sum_c T_c[(p >> k_c) & m_c], "
        "T_c[s] the sum of the",
        "projection rows of the bits set in s"
        + (" (exact int8 sums; one float32 multiply by the column's scale, bit for bit the "
           "int8 compute header)." if integer else " (float64 sums, stored float32)."),
        "Every int64 position is defined, as in the reference (two's complement wrap).",
    ]
    if integer:
        lines += [
            f"{function}_q: the same row's exact int16 sums (out[c] * {base}_t0_scale[c] is "
            f"{function}'s out[c]),",
            "for an int8 pipeline. The tables hold two columns a uint32_t word (2c low, 2c + 1 "
            f"high), biased by {biases}",
            "so the lanes of a sum carry nothing into each other and add to the int16 sum + "
            "0x8000.",
        ]
        body = _binary_lanes(s.d_model, base, macro, index_lines, len(low_first),
                             quant["axis"] is not None)
    else:
        reads = " + ".join(f"{base}_t{c}[s{c}][j]" for c in range(len(low_first)))
        body = ["static inline void " + f"{function}(int64_t pos, float out[{macro}_D])", "{",
                "    const uint64_t u = (uint64_t)pos;  /* two's complement: pos mod 2^64 */",
                *index_lines, "    uint32_t j;",
                f"    for (j = 0; j < {macro}_D; ++j) {{", f"        out[j] = {reads};", "    }",
                "}"]
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
        f.write(("\n" + "\n".join(body) + "\n").encode())
        f.write(_closing_sliced(config, "the slice tables (t0, t1, ...)",
                                hashlib.sha256(data).hexdigest(), len(data)).encode())

    return Prepared(manifest, write)


def _binary_lanes(d: int, base: str, macro: str, index_lines: list[str], count: int,
                  per_column: bool) -> list[str]:
    """``encode`` and ``encode_q`` over the lane-packed tables: one 32-bit add per slice per
    pair of columns; the lanes' ``+ 0x8000`` taken off exactly in C99 (``(int32_t)lane -
    32768``), or by XOR 0x80008000 under GNU C: then ``encode`` signs the lanes by GCC's
    documented modulo conversion and arithmetic shift (one instruction fewer a pair of
    columns on a Cortex-M4), and on a little-endian target ``encode_q`` stores the word as its
    two ``int16_t`` (two's complement, C99 7.18.1.1)."""
    even = d // 2
    rows = ", ".join(f"*r{c} = {base}_t{c}[s{c}]" for c in range(count))
    word = " + ".join(f"r{c}[i]" for c in range(count))
    head = ["    const uint64_t u = (uint64_t)pos;  /* two's complement: pos mod 2^64 */",
            *index_lines, f"    const uint32_t {rows};", "    uint32_t i;"]

    def scale(column: str) -> str:
        return f"{base}_t0_scale[{column if per_column else '0'}]"

    lo, hi = "(int32_t)(w & 0xFFFFu) - 32768", "(int32_t)(w >> 16) - 32768"
    gnu = "#if defined(__GNUC__)  /* GCC and clang: conversion modulo 2^16, >> arithmetic */"
    encode = [f"static inline void {base}_encode(int64_t pos, float out[{macro}_D])", "{", *head,
              f"    for (i = 0; i < {even}u; ++i) {{",
              f"        const uint32_t w = {word};",
              gnu,
              "        const uint32_t v = w ^ 0x80008000u;",
              f"        out[2 * i] = {scale('2 * i')} * (float)(int16_t)v;",
              f"        out[2 * i + 1] = {scale('2 * i + 1')} * (float)((int32_t)v >> 16);",
              "#else",
              f"        out[2 * i] = {scale('2 * i')} * (float)({lo});",
              f"        out[2 * i + 1] = {scale('2 * i + 1')} * (float)({hi});",
              "#endif",
              "    }"]
    codes = [f"static inline void {base}_encode_q(int64_t pos, int16_t out[{macro}_D])", "{",
             *head,
             f"    for (i = 0; i < {even}u; ++i) {{",
             f"        const uint32_t w = {word};",
             "#if defined(__GNUC__) && defined(__BYTE_ORDER__) && "
             "__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__",
             "        const uint32_t v = w ^ 0x80008000u;",
             "        __builtin_memcpy(&out[2 * i], &v, 4);",
             "#else",
             f"        out[2 * i] = (int16_t)({lo});",
             f"        out[2 * i + 1] = (int16_t)({hi});",
             "#endif",
             "    }"]
    if d % 2:  # the last column alone in its word's low lane
        last = f"    {{ const uint32_t w = {word.replace('[i]', f'[{even}]')};"
        encode += [last, f"      out[{d - 1}] = {scale(str(d - 1))} * (float)({lo}); }}"]
        codes += [last, f"      out[{d - 1}] = (int16_t)({lo}); }}"]
    return [*encode, "}", "", *codes, "}"]
