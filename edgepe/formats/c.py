"""C99 headers (``--format c``): a constant table, or a function that computes the encoding.

A header is self-contained (``<stdint.h>``; ``<math.h>`` for sinf/cosf), compiles with
``gcc -std=c99 -Wall -Wextra -Werror -pedantic`` (``edgepe.verify.c_runner`` proves it), and is
named by the manifest: ``symbol`` (the array), ``function`` (compute mode), ``accessor``
(bit-packed tables), ``macro_prefix``. Identifiers are ``{c_prefix}_{scheme}_...`` with every
character outside ``[A-Za-z0-9_]`` replaced by ``_`` (Names, below).

``--mode table`` (any scheme; the table of ``table_values``, positions clamped to its rows;
a bias table adds ``int64_t edgepe_alibi_table_row(int64_t t, int64_t u)``, the row of query
``t`` and key ``u``: the distance clamped to the table, as every bias format indexes it):

    static EDGEPE_GRAY_L512_D10_U8_TABLE_ATTR const uint8_t edgepe_gray_L512_d10_u8_table[512][10]
        = {{0, 0, ...}, ...};

in the stored dtype of ``tables.stored_dtype``: ``float`` (float32), ``uint8_t`` (0/1 tables),
``int8_t`` (``--quantize int8``, with ``..._ZERO_POINT`` and ``..._scale[]``: a value is
``scale[c] * q``), or ``--dtype bit``: ``uint8_t edgepe_gray_L512_d10_bit_table[BYTES]``
packed as the bin format packs it, read through ``uint8_t
edgepe_gray_L512_d10_bit_table_bit(uint32_t p, uint32_t k)``.
float16 has no C99 type and is refused.

``--mode compute`` (the bit family and ``binary``; float schemes below): ``static inline
void edgepe_gray_L512_d10_f32_encode(int64_t pos, float out[D])`` (``const int64_t pos[K]``
for multi-index schemes) computes one position with shifts and masks, wrapping like the
reference: the bits are those of ``pos mod 2^n`` in two's complement (``(uint64_t)pos`` is
exactly that in C99, 6.3.1.3). ``binary`` adds its projection as ``const float
edgepe_binary_L512_d64_f32_weights[n][D]`` (row ``k`` = the weights of bit ``k``) and sums the
rows of the set bits in bit order: a device stores ``n x D`` weights instead of ``max_len x D``
values. With ``--quantize int8`` the weights are ``int8_t`` with a float32 scale per column
(``edgepe.graphs.quant``'s projection, shared with the int8 ONNX graph): an exact ``int32`` sum of
the active rows, then one float32 multiply.

``sinusoidal`` and ``rope`` (``--mode compute``): ``f(int64_t pos, float out[D])`` from the
reference's own float32 frequencies ``..._inv_freq[D/2]``: the angle ``(float)pos * w_i`` in
float32 (the reference's, bit for bit), then ``sinf``/``cosf`` from the C library (the header
includes ``<math.h>``; link with ``-lm``), within the scheme's tolerance. ``alibi``:
``f(int64_t t, int64_t u, float out[H])`` = ``-(slopes[h] * (float)|t - u|)``, exact.

Floats are printed with ``%.9g`` (9 significant digits round-trip every float32; a C compiler
converts the decimal literal with ``f`` suffix straight to the nearest float, C99 6.4.4.2), so
the compiled array holds exactly the reference's float32 bits. The array is aligned to
``c_align`` bytes (for DMA/SIMD) with the GNU attribute, C11 ``_Alignas`` or MSVC
``__declspec``, whichever the compiler has. The sha256 of the array's bytes (little-endian,
row-major: the same bytes as the ``bin`` export) is in the closing comment, since the file's own
sha256 (in the manifest) cannot be inside the file.

Names: ``{c_prefix}_{scheme}_{tag}`` with ``tag = L{max_len}_d{d_model}_{f32|u8|bit|i8}``
(``h{heads}`` in place of ``d`` for bias schemes), e.g. ``edgepe_gray_L512_d10_bit_table``, and
the include guard ``EDGEPE_GRAY_L512_D10_BIT_TABLE_H``: headers that differ in any of these
include side by side (issue 21). Headers that differ only in parameters or weights (two seeds,
two checkpoints) need distinct ``--c-prefix`` values; the header's opening comment says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.formats.bin import data_chunks, prepared_table, stored_chunks
from edgepe.formats.c_schemes import COMPUTE_SCHEMES, FLOAT_COMPUTE_SCHEMES
from edgepe.formats.onnx import output_shape

# Schemes whose function reads a stored [rows][D] float32 array (the manifest's symbol):
# binary's projection, fourier-binary's basis (a fixed linear map of the bits, guide 5.2 as
# edgepe defines it), binary-gated's gates (row 0: g, row 1: 1 - g).
WEIGHTED = ("binary", "fourier-binary", "binary-gated")
C_TYPES = {"float32": "float", "uint8": "uint8_t", "int8": "int8_t", "bit": "uint8_t"}


def c_identifier(text: str) -> str:
    """``text`` as a C identifier: other characters become ``_``, a leading digit gets ``_``."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return f"_{name}" if not name or name[0].isdigit() else name


# A "%.9gf" float literal without "." or exponent ("1f", "-0f") is not C: it needs "1.0f".
_INTEGRAL = re.compile(r"(?<![\w.+-])(-?\d+)f")


def c_rows(values: np.ndarray, indent: str = "    ") -> str:
    """One ``{a, b, c},`` line per row of a 2-D float32 or integer array, as C literals.

    Floats are ``%.9g`` with ``f`` (exact for float32, module docstring). The whole chunk is one
    ``%`` format (a C loop, no Python loop over rows): 3x faster than formatting value by value.
    """
    rows, cols = values.shape
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            raise BadParameterError("cannot write a C header: the values include inf or nan")
        cell, flat = "%.9gf", values.astype(np.float64).ravel().tolist()
    else:
        cell, flat = "%d", values.ravel().tolist()
    text = ((indent + "{" + ", ".join([cell] * cols) + "},\n") * rows) % tuple(flat)
    return _INTEGRAL.sub(r"\1.0f", text) if cell != "%d" else text


def c_floats(values) -> list[str]:
    """C ``float`` literals of a few float32 values (scales, constants), exact."""
    values = np.atleast_1d(np.asarray(values, dtype=np.float32))
    return c_rows(values.reshape(1, -1), indent="")[1:-3].split(", ")


def c_bytes(data: bytes, per_line: int = 16) -> str:
    """``0x..`` byte literals, ``per_line`` a line (one ``%`` format, like ``c_rows``)."""
    values = tuple(data)
    whole = len(values) - len(values) % per_line
    line = "    " + ", ".join(["0x%02x"] * per_line) + ",\n"
    text = (line * (whole // per_line)) % values[:whole]
    if whole < len(values):
        text += ("    " + ", ".join(["0x%02x"] * (len(values) - whole)) + ",\n") % values[whole:]
    return text


def variant_tag(config: ExportConfig) -> str:
    """What tells two headers of one scheme apart: ``L{max_len}_d{d_model}`` (``_h{heads}`` for
    bias schemes) and the stored type, ``f32``, ``u8``, ``bit`` or ``i8`` (``--quantize int8``)."""
    s = config.scheme
    size = f"L{s.max_len}_" + (f"h{s.heads}" if s.d_model is None else f"d{s.d_model}")
    stored = "i8" if config.quantize == "int8" else {
        "float32": "f32", "uint8": "u8", "bit": "bit", "float16": "f16"}[config.dtype]
    return f"{size}_{stored}"


def names(config: ExportConfig) -> dict[str, str]:
    """The header's identifiers: ``base`` (``{prefix}_{scheme}_{variant_tag}``), the macro
    prefix, the guard. Unique per (scheme, max_len, d_model or heads, stored type, mode), so
    headers of one scheme can be included together (issue 21); headers that differ only in
    parameters or weights need different ``--c-prefix`` values."""
    base = c_identifier(f"{config.c_prefix}_{config.scheme.scheme}_{variant_tag(config)}")
    kind = "TABLE" if config.mode == "table" else "ENCODE"
    return {"base": base, "macro": base.upper(), "guard": f"{base.upper()}_{kind}_H"}


def check_c_choices(config: ExportConfig) -> None:
    """Refuse what a C header cannot hold, naming what it can."""
    align = config.c_align
    if align < 1 or align & (align - 1):
        raise BadParameterError(f"--c-align must be a power of two (bytes), got {align}")
    if config.lowering != "bitwise":
        raise BadParameterError(
            f"--lowering {config.lowering} chooses the integer ops of an ONNX graph; a C header "
            "holds a table or computes with C's own shifts and masks: drop --lowering for "
            "--format c"
        )
    if config.dtype == "float16":  # in either mode: a compute function or a table
        raise BadParameterError(
            "--format c has no float16 (C99 has no half type): use --dtype float32 (or "
            "--quantize int8 for a quarter of its bytes); --dtype uint8/bit hold 0/1 tables only"
            + ("" if config.mode == "table" else ", with --mode table")
        )
    if config.mode == "table":
        return
    scheme = config.scheme.scheme
    if scheme not in COMPUTE_SCHEMES:
        raise BadParameterError(
            f"--format c --mode compute has no function for scheme '{scheme}'; use --mode table, "
            f"or a scheme with one: {', '.join(COMPUTE_SCHEMES)}"
        )
    if config.dtype != "float32":
        raise BadParameterError(
            f"C compute functions write float32 (--dtype float32), got --dtype {config.dtype}; "
            f"a {config.dtype} table is --mode table"
        )
    if config.quantize != "none" and scheme != "binary":
        raise BadParameterError(
            f"--quantize int8 applies to a C compute function only for 'binary' (its weights); "
            f"'{scheme}' computes bits with no weights: use --mode table --quantize int8"
        )


def prepare(config: ExportConfig, module) -> Prepared:
    """The C header of ``config``: a table (``--mode table``) or a compute function."""
    check_c_choices(config)
    if config.mode == "table":
        return _table_header(config, module)
    if config.scheme.scheme in FLOAT_COMPUTE_SCHEMES:
        return _float_compute_header(config, module)
    return _compute_header(config, module)


def default_mode(scheme: str) -> str:
    """``--mode`` for ``--format c`` when none is given: compute where a C function exists."""
    return "compute" if scheme in COMPUTE_SCHEMES else "table"


# ---------------------------------------------------------------------------------------------
# Shared pieces


def _opening(config: ExportConfig, what: str, lines: Iterable[str],
             includes: str = "#include <stdint.h>\n") -> str:
    s = config.scheme
    spec = s.spec
    params = json.dumps(s.as_dict()["params"], sort_keys=True)
    guard = names(config)["guard"]
    body = [
        f"edgepe: {what}",
        f"scheme {s.scheme} ({spec.source}): {spec.summary}",
        f"max_len {s.max_len}, "
        + (f"heads {s.heads}" if s.d_model is None else f"d_model {s.d_model}")
        + f", params {params}",
        *lines,
        f"Names are {names(config)['base']}_*: unique per scheme, max_len, width, stored",
        "type and mode; headers that differ only in parameters or weights need distinct "
        "--c-prefix.",
        "Generated by edgepe (edgepe export ... --format c); do not edit.",
    ]
    comment = "/*\n" + "".join(f" * {line}\n" if line else " *\n" for line in body) + " */\n"
    return (
        f"{comment}#ifndef {guard}\n#define {guard}\n\n{includes}\n"
    )


def _attribute(macro: str, align: int) -> str:
    """``macro``: alignment (and GNU ``unused``, so a unit that does not read it stays quiet)."""
    return (
        f"/* {align}-byte alignment for DMA/SIMD loads, in the compiler's own spelling. */\n"
        "#if defined(__GNUC__) || defined(__clang__)\n"
        f"#define {macro} __attribute__((aligned({align}), unused))\n"
        "#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L\n"
        f"#define {macro} _Alignas({align})\n"
        "#elif defined(_MSC_VER)\n"
        f"#define {macro} __declspec(align({align}))\n"
        "#else\n"
        f"#define {macro}\n"
        "#endif\n\n"
    )


def _closing(config: ExportConfig, what: str, digest: str | None, size: int) -> str:
    """The end of the header: the sha256 of the array's bytes (if any) and the guard's end."""
    guard = names(config)["guard"]
    text = ""
    if digest is not None:
        same = ";\n * the same bytes as the --format bin export" if config.mode == "table" else ""
        text = (
            f"\n/* sha256 of the {size} bytes of {what} as laid out in memory\n"
            f" * (little-endian, row-major{same}):\n * {digest} */\n"
        )
    return f"{text}\n#endif /* {guard} */\n"


def _quant_constants(macro: str, base: str, section: dict[str, Any], value: str) -> str:
    """``ZERO_POINT`` and the float32 ``scale[]`` of an int8 array; ``value`` says how they
    dequantise (in C, for the header's comment)."""
    scale = np.atleast_1d(np.asarray(section["scale"], dtype=np.float32))
    c = "c" if section["axis"] is not None else "0"
    which = "one per column c" if section["axis"] is not None else "one for every column"
    return (
        f"/* int8, symmetric (zero point 0), {which}:\n"
        f" *   {value.format(scale=f'{base}_scale[{c}]')}\n"
        f" * |that - float32 reference| <= {section['bound']!r} (proven; measured "
        f"{section['max_abs_err']!r}). */\n"
        f"#define {macro}_ZERO_POINT 0\n"
        f"#define {macro}_SCALES {scale.size}\n"
        f"static {macro}_ATTR const float {base}_scale[{macro}_SCALES] = "
        f"{{{', '.join(c_floats(scale))}}};\n\n"
    )


# ---------------------------------------------------------------------------------------------
# --mode table


def _table_header(config: ExportConfig, module) -> Prepared:
    table, dtype, quant = prepared_table(config, module)
    rows, cols = table["shape"]
    n = names(config)
    symbol = f"{n['base']}_table"
    macro = symbol.upper()
    packed = dtype == "bit"
    manifest = {
        **base_manifest(config, [rows, cols], dtype),
        **{k: table[k] for k in ("quant", "numpy_dtype", "byte_order", "bitorder", "layout")},
        "symbol": symbol,
        "accessor": f"{symbol}_bit" if packed else None,
        "function": None,
        "macro_prefix": macro,
        "c_type": C_TYPES[dtype],
    }
    size = table["layout"]["data_bytes"]

    def write(f: BinaryIO) -> None:
        lines = [
            f"{symbol}: the {rows} x {cols} table, {dtype}"
            + (" (bit-packed, one bit an entry)" if packed else ""),
            table["layout"]["rows"] + ".",
        ]
        if packed:
            lines.append(
                f"Entry (p, k) is bit i = p * {cols} + k: bit i % 8 of byte i / 8 (LSB first)."
            )
        f.write(_opening(config, f"{config.scheme.scheme} table", lines).encode())
        head = f"#define {macro}_ROWS {rows}\n#define {macro}_COLS {cols}\n"
        head += f"#define {macro}_BYTES {size}\n\n"
        head += _attribute(f"{macro}_ATTR", config.c_align)
        if quant is not None:
            head += _quant_constants(
                macro, symbol, table["quant"], f"value(p, c) = {{scale}} * {symbol}[p][c]"
            )
        shape = f"[{macro}_BYTES]" if packed else f"[{macro}_ROWS][{macro}_COLS]"
        head += f"static {macro}_ATTR const {C_TYPES[dtype]} {symbol}{shape} = {{\n"
        f.write(head.encode())
        digest = hashlib.sha256()
        if packed:
            for data in data_chunks(config, module, dtype):
                digest.update(data)
                f.write(c_bytes(data).encode())
        else:
            for chunk in stored_chunks(config, module, dtype, quant):
                digest.update(chunk.astype(chunk.dtype.newbyteorder("<")).tobytes())
                f.write(c_rows(chunk).encode())
        f.write(b"};\n")
        if config.scheme.spec.kind == "bias":
            f.write(_bias_row_function(symbol, macro).encode())
        if packed:
            index = _bit_index(rows, cols)
            f.write(
                (
                    f"\n/* Entry (p, k) of the table, 0 or 1 (p < {macro}_ROWS, "
                    f"k < {macro}_COLS). */\n"
                    f"static inline uint8_t {symbol}_bit(uint32_t p, uint32_t k)\n{{\n"
                    f"    const {index} i = ({index})p * {macro}_COLS + k;  /* row-major */\n"
                    f"    return (uint8_t)(({symbol}[i >> 3] >> (i & 7u)) & 1u);\n}}\n"
                ).encode()
            )
        f.write(_closing(config, symbol, digest.hexdigest(), size).encode())

    return Prepared(manifest, write)


def _bit_index(rows: int, cols: int) -> str:
    """The C type of a bit-packed table's entry index ``p * cols + k``, at most
    ``rows * cols - 1``: ``uint32_t`` while that fits in 32 bits, else ``uint64_t``."""
    return "uint32_t" if rows * cols <= 2**32 else "uint64_t"


def _bias_row_function(symbol: str, macro: str) -> str:
    """``{symbol}_row(t, u)``: the row of a bias table for query ``t`` and key ``u``, as
    ``table_values.bias_rows`` computes it (the same index as the ONNX graph and the npy reader)."""
    return (
        f"\n/* Row of {symbol} for query position t and key position u: the distance t - u\n"
        f" * clamped to [-({macro}_ROWS - 1) / 2, ({macro}_ROWS - 1) / 2], offset to a row. Each\n"
        " * position saturates at +-2^61 first, so t - u cannot overflow. */\n"
        f"static inline int64_t {symbol}_row(int64_t t, int64_t u)\n{{\n"
        "    const int64_t sat = (int64_t)1 << 61;\n"
        f"    const int64_t half = ({macro}_ROWS - 1) / 2;\n"
        "    const int64_t d = (t < -sat ? -sat : t > sat ? sat : t)\n"
        "                    - (u < -sat ? -sat : u > sat ? sat : u);\n"
        "    return (d < -half ? -half : d > half ? half : d) + half;\n}\n"
    )


# ---------------------------------------------------------------------------------------------
# --mode compute


def _compute_header(config: ExportConfig, module) -> Prepared:
    s = config.scheme
    n = names(config)
    macro, base = n["macro"], n["base"]
    function = f"{base}_encode"
    d, nb = s.d_model, s.n_bits
    symbol = f"{base}_weights" if s.scheme in WEIGHTED else None
    weights, quant = (None, None) if symbol is None else _weights(config, module, symbol)
    manifest = {
        **base_manifest(config, output_shape(config), "float32"),
        "quant": quant,
        "symbol": symbol,
        "symbol_shape": None if weights is None else list(weights.shape),
        "symbol_dtype": None if weights is None else str(weights.dtype),
        "accessor": None,
        "function": function,
        "macro_prefix": macro,
        "n_bits": nb,
        "byte_order": "little",
    }
    arity = s.arity
    signature = (
        f"static inline void {function}(const int64_t pos[{macro}_ARITY], float out[{macro}_D])"
        if arity is not None
        else f"static inline void {function}(int64_t pos, float out[{macro}_D])"
    )

    def write(f: BinaryIO) -> None:
        lines = [
            f"{function}: the encoding of one position, computed (no table); "
            f"out[{d}] float32.",
            "Every int64 position is defined, as in the reference: the bits are those of "
            "pos mod 2^n (two's complement).",
        ]
        if s.spec.oob == "mixed":
            lines.append(
                f"The linear part is (float)pos / {max(s.max_len - 1, 1)}, defined for |pos| <= "
                "2^24 (float32's exact integers); compile without FP contraction (-std=c99 "
                "does) so it rounds as the reference does."
            )
        if weights is not None:
            rows, what = weights.shape[0], {
                "binary": "projection, row k = weights of bit k",
                "fourier-binary": "DFT basis [cos | -sin], row k = bit k",
                "binary-gated": "gates, row 0 = g = sigmoid(logits), row 1 = 1 - g",
            }[s.scheme]
            lines.append(f"{symbol}: [{rows}][{d}] {weights.dtype} {what}.")
        f.write(_opening(config, f"{s.scheme} compute function", lines).encode())
        head = f"#define {macro}_D {d}\n#define {macro}_N_BITS {nb}\n"
        if arity is not None:
            head += f"#define {macro}_ARITY {arity}\n"
        f.write((head + "\n").encode())
        digest, size = None, 0
        if weights is not None:
            f.write(_attribute(f"{macro}_ATTR", config.c_align).encode())
            if quant is not None:
                value = f"out[c] = {{scale}} * (sum of {symbol}[k][c] over the set bits k)"
                f.write(_quant_constants(macro, symbol, quant, value).encode())
            ctype = C_TYPES[str(weights.dtype)]
            rows = "2" if s.scheme == "binary-gated" else f"{macro}_N_BITS"  # g and 1 - g
            f.write(
                f"static {macro}_ATTR const {ctype} {symbol}[{rows}][{macro}_D] = {{\n"
                f"{c_rows(weights)}}};\n\n".encode()
            )
            data = np.ascontiguousarray(weights, weights.dtype.newbyteorder("<")).tobytes()
            digest, size = hashlib.sha256(data).hexdigest(), len(data)
        f.write(f"{signature}\n{{\n{_body(config, module, macro, symbol, quant)}}}\n".encode())
        f.write(_closing(config, symbol, digest, size).encode())

    return Prepared(manifest, write)


def _weights(config: ExportConfig, module, symbol: str) -> tuple[np.ndarray, dict | None]:
    """``binary``'s projection as stored: ``(W^T [n, d] float32, None)``, or with
    ``--quantize int8`` ``(q [n, d] int8, quant section)``.

    The int8 projection is ``edgepe.graphs.quant``'s, the one the ONNX int8 graph holds: same ``q``,
    same scales; its ``quant`` section is measured and proven for this header's arithmetic
    (exact int32 sum of the active rows, one float32 multiply by the column's scale).
    """
    if config.scheme.scheme == "fourier-binary":
        return module.basis.detach().numpy().astype(np.float32), None  # [n, d]
    if config.scheme.scheme == "binary-gated":
        import torch

        with torch.no_grad():
            return torch.stack(module.gates()).numpy().astype(np.float32), None  # [2, d]
    # projection.weight is [d, n] (Linear computes x W^T): the header stores W^T, row k = bit k.
    weights = module.projection.weight.detach().float().numpy().T.astype(np.float32)
    if config.quantize != "int8":
        return weights, None
    from edgepe.graphs.int8 import check_measurable, projection_quant
    from edgepe.graphs.quant import check_quantizable

    check_quantizable(config)
    check_measurable(config)
    q, _, _, quant = projection_quant(config, module, "int32")
    return q, {**quant, "tensor": symbol, "scale_tensor": f"{symbol}_scale"}


def _body(config: ExportConfig, module, macro: str, symbol: str | None, quant) -> str:
    """The statements of the compute function (one position, shifts and masks)."""
    s = config.scheme
    nb, d = s.n_bits, s.d_model
    bit = "(u >> k) & 1u"
    loop = f"    uint32_t k;\n    for (k = 0; k < {macro}_D; ++k) {{\n"
    if s.scheme in ("binary-bits", "binary-signed", "binary-smooth", "gray"):
        if s.scheme == "binary-smooth":
            lo, hi = c_floats(np.array([module.lo.item(), module.hi.item()], dtype=np.float32))
            one, zero = hi, lo
        elif s.scheme == "binary-signed":
            one, zero = "1.0f", "-1.0f"  # 2b - 1, exactly
        else:
            one, zero = "1.0f", "0.0f"
        head = "    const uint64_t u = (uint64_t)pos"
        if s.scheme == "gray":
            mask = (1 << nb) - 1
            head += f" & UINT64_C(0x{mask:x});  /* pos mod 2^{nb} */\n"
            head += "    const uint64_t g = u ^ (u >> 1);  /* Gray code */\n"
            bit = "(g >> k) & 1u"
        else:
            head += ";  /* two's complement: pos mod 2^64 */\n"
        # Columns k >= n hold the zero bit (the reference's bits(): shifts past n are 0).
        return (
            head + loop
            + f"        out[k] = (k < {macro}_N_BITS && ({bit})) ? {one} : {zero};\n    }}\n"
        )
    if s.scheme == "binary-multilevel":
        per = d // s.params["groups"]
        return (
            "    const uint64_t u = (uint64_t)pos;\n" + loop
            + f"        /* group k / {per} holds the bits of pos >> (k / {per}) */\n"
            + f"        const uint32_t b = k / {per}u + k % {per}u;\n"
            + f"        out[k] = (b < {macro}_N_BITS && ((u >> b) & 1u)) ? 1.0f : 0.0f;\n    }}\n"
        )
    if s.scheme == "binary-2d":
        return (
            "    const uint64_t u[2] = {(uint64_t)pos[0], (uint64_t)pos[1]};\n" + loop
            + "        /* column 2i is bit i of x, column 2i + 1 bit i of y */\n"
            + "        const uint32_t b = k >> 1;\n"
            + f"        out[k] = (b < {macro}_N_BITS && ((u[k & 1u] >> b) & 1u)) ? 1.0f : 0.0f;"
            + "\n    }\n"
        )
    if s.scheme == "hierarchical":
        text = "    uint32_t k;\n"
        offset = 0
        for level, width in enumerate(s.params["widths"]):
            text += (
                f"    for (k = 0; k < {width}u; ++k) {{  /* level {level}: bits of pos mod "
                f"2^{width} */\n"
                f"        out[{offset} + k] = (((uint64_t)pos[{level}] >> k) & 1u) ? 1.0f : 0.0f;"
                "\n    }\n"
            )
            offset += width
        return text
    if s.scheme in ("hybrid-int-binary", "binary-gated"):
        # x(p) = pos / (L - 1): one exact conversion and one correctly rounded float32 division,
        # as the reference's normalised(). Through int32_t: exact for |pos| <= 2^24 (the scheme's
        # limit), and a 32-bit MCU needs no libgcc helper (int64 -> float is __aeabi_l2f).
        head = (
            "    const uint64_t u = (uint64_t)pos;  /* two's complement: pos mod 2^64 */\n"
            "    const float x = (float)(int32_t)pos / "
            f"{c_floats([max(s.max_len - 1, 1)])[0]};  /* |pos| <= 2^24 */\n"
        )
        if s.scheme == "hybrid-int-binary":
            half = d // 2
            linear = f"    for (k = 0; k < {half}u; ++k) out[k] = x;\n" if half else (
                "    (void)x;  /* d_model 1: no linear column */\n")
            return (
                head + "    uint32_t k;\n" + linear
                + f"    for (k = 0; k < {d - half}u; ++k) {{  /* then the bits, zero past n */\n"
                f"        out[{half} + k] = (k < {macro}_N_BITS && ((u >> k) & 1u)) ? 1.0f : 0.0f;"
                "\n    }\n"
            )
        # b g + x (1 - g): b g is exactly g or 0, then one multiply and one add, the
        # reference's order (b * g + lin * h).
        return (
            head + loop
            + f"        const float bg = (k < {macro}_N_BITS && ((u >> k) & 1u)) ? "
            f"{symbol}[0][k] : 0.0f;\n"
            + f"        out[k] = bg + x * {symbol}[1][k];\n    }}\n"
        )
    assert s.scheme in ("binary", "fourier-binary"), s.scheme
    # Sum the weight rows of the set bits in bit order (float32 adds: the reference's matmul may
    # add in another order, within the scheme's tolerance). With int8 weights the sum is exact
    # in int32 (|sum| <= 41 * 127) and one float32 multiply by the column's scale dequantises.
    if quant is None:
        return (
            "    const uint64_t u = (uint64_t)pos;\n    uint32_t j, k;\n"
            f"    for (j = 0; j < {macro}_D; ++j) out[j] = 0.0f;\n"
            f"    for (k = 0; k < {macro}_N_BITS; ++k) {{\n"
            "        if ((u >> k) & 1u) {\n"
            f"            for (j = 0; j < {macro}_D; ++j) out[j] += {symbol}[k][j];\n"
            "        }\n    }\n"
        )
    # The set bits are listed once, so each column sums only their rows: 3.5x fewer
    # instructions on a Cortex-M4F than testing every bit for every column (10885 -> 3081 a
    # position at L=512, d=64; 2.2x on an M3), for N_BITS bytes of stack. Same sum, same order.
    scale = "j" if quant["axis"] is not None else "0"
    return (
        "    const uint64_t u = (uint64_t)pos;\n"
        f"    uint8_t set[{macro}_N_BITS];  /* the set bits of pos mod 2^n, in bit order */\n"
        "    uint32_t j, k, n = 0;\n"
        f"    for (k = 0; k < {macro}_N_BITS; ++k) {{\n"
        "        if ((u >> k) & 1u) set[n++] = (uint8_t)k;\n    }\n"
        f"    for (j = 0; j < {macro}_D; ++j) {{\n"
        "        int32_t acc = 0;\n"
        f"        for (k = 0; k < n; ++k) acc += {symbol}[set[k]][j];\n"
        f"        out[j] = {symbol}_scale[{scale}] * (float)acc;\n    }}\n"
    )


def _float_compute_header(config: ExportConfig, module) -> Prepared:
    """sinusoidal and rope: ``f(int64_t pos, float out[D])`` from the reference's float32
    frequencies and libm's ``sinf``/``cosf``; alibi: ``f(int64_t t, int64_t u, float out[H])``,
    the float32 slopes times ``|t - u|`` (one multiply a head)."""
    s = config.scheme
    n = names(config)
    macro, base = n["macro"], n["base"]
    function = f"{base}_encode"
    alibi = s.scheme == "alibi"
    symbol = f"{base}_slopes" if alibi else f"{base}_inv_freq"
    # The reference's own float32 buffers: the C angle p * w_i is then its angle, bit for bit.
    values = (module.slopes if alibi else module.inv_freq).detach().numpy().astype(np.float32)
    count = f"{macro}_HEADS" if alibi else f"{macro}_HALF"
    manifest = {
        **base_manifest(config, output_shape(config), "float32"),
        "symbol": symbol,
        "symbol_shape": [int(values.size)],
        "symbol_dtype": "float32",
        "accessor": None,
        "function": function,
        "macro_prefix": macro,
        "byte_order": "little",
    }
    limit = s.spec.position_limit
    # yarn / longrope: cos, sin times the attention factor, as Rope.encode (Rope always sets it)
    scaled = s.scheme == "rope" and module.scaled
    if alibi:
        signature = (f"static inline void {function}(int64_t t, int64_t u, "
                     f"float out[{macro}_HEADS])")
        lines = [
            f"{function}: the bias of query t and key u",
            f"for every head: out[{s.heads}] float32 = -({symbol}[h] * |t - u|),",
            "as the reference computes it (exact). Defined for |t|, |u| <= "
            f"{limit} (float32's exact",
            "integers; |t - u| <= 2^25 rounds once, in the same conversion as the reference's).",
        ]
        head = f"#define {macro}_HEADS {s.heads}\n\n"
        body = (
            "    const int64_t d = t - u;\n"
            "    /* |t - u| <= 2^25 fits int32; a 32-bit MCU converts it without a libgcc "
            "helper. */\n"
            "    const float dist = (float)(int32_t)(d < 0 ? -d : d);\n    uint32_t h;\n"
            f"    for (h = 0; h < {macro}_HEADS; ++h) out[h] = -({symbol}[h] * dist);\n"
        )
    else:
        signature = f"static inline void {function}(int64_t pos, float out[{macro}_D])"
        half_sin = s.scheme == "sinusoidal" and s.params.get("layout") == "half"
        offset = s.params["offset"] if s.scheme == "sinusoidal" else 0  # resolved: always set
        layout = (f"out[i] = sinf(a_i), out[{macro}_HALF + i] = cosf(a_i)" if half_sin
                  else "out[2i] = sinf(a_i), out[2i + 1] = cosf(a_i)" if s.scheme == "sinusoidal"
                  else f"out[i] = cosf(a_i), out[{macro}_HALF + i] = sinf(a_i)")
        lines = [
            f"{function}: the encoding of one position, computed;",
            f"out[{s.d_model}] float32: {layout},",
            (f"a_i = (float)(pos + {offset}) * {symbol}[i] in float32 (the reference's "
             "angle)." if offset else
             f"a_i = (float)pos * {symbol}[i] in float32 (the reference's angle)."),
            f"Defined for |pos| <= {limit} (float32's exact integers). sinf/cosf are your C "
            "library's (link",
            f"with -lm), within the scheme's tolerance of the reference, atol "
            f"{s.spec.tolerance[1]!r}: measured max",
            "1.19e-7 on newlib (Cortex-M4F and M3 under QEMU), 5.96e-8 on glibc x86-64, "
            "|pos| <= 2^24.",
        ]
        head = f"#define {macro}_D {s.d_model}\n#define {macro}_HALF {s.d_model // 2}\n\n"
        if scaled:
            lines.append(f"cos, sin times {base}_scale[i] (the attention factor), in float32.")
        store = (f"        out[i] = cosf(a) * {base}_scale[i];\n"
                 f"        out[{macro}_HALF + i] = sinf(a) * {base}_scale[i];\n" if scaled else
                 f"        out[i] = sinf(a);\n        out[{macro}_HALF + i] = cosf(a);\n"
                 if half_sin else
                 "        out[2 * i] = sinf(a);\n        out[2 * i + 1] = cosf(a);\n"
                 if s.scheme == "sinusoidal" else
                 f"        out[i] = cosf(a);\n        out[{macro}_HALF + i] = sinf(a);\n")
        body = (
            "    /* Through int32_t: exact for |pos| <= 2^24, and no libgcc helper on a 32-bit "
            "MCU. */\n"
            + (f"    const float p = (float)(int32_t)(pos + {offset});\n    uint32_t i;\n"
               if offset else "    const float p = (float)(int32_t)pos;\n    uint32_t i;\n")
            + f"    for (i = 0; i < {macro}_HALF; ++i) {{\n"
            f"        const float a = p * {symbol}[i];\n{store}    }}\n"
        )

    def write(f: BinaryIO) -> None:
        includes = "#include <stdint.h>\n" + ("" if alibi else "#include <math.h>\n")
        f.write(_opening(config, f"{s.scheme} compute function", lines, includes).encode())
        f.write(head.encode())
        f.write(_attribute(f"{macro}_ATTR", config.c_align).encode())
        cells = c_floats(values)
        literals = ",\n    ".join(", ".join(cells[i:i + 8]) for i in range(0, len(cells), 8))
        f.write(f"static {macro}_ATTR const float {symbol}[{count}] = {{\n    {literals}\n}};"
                "\n\n".encode())
        if scaled:
            scale = c_floats(module.scale.detach().numpy())  # c_floats writes float32
            rows = ",\n    ".join(", ".join(scale[i:i + 8]) for i in range(0, len(scale), 8))
            f.write(f"static {macro}_ATTR const float {base}_scale[{count}] = {{\n    {rows}\n}};"
                    "\n\n".encode())
        f.write(f"{signature}\n{{\n{body}}}\n".encode())
        data = values.astype("<f4").tobytes()
        f.write(_closing(config, symbol, hashlib.sha256(data).hexdigest(), len(data)).encode())

    return Prepared(manifest, write)


# -- reading -------------------------------------------------------------------------------


def check_file(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse a header that does not define the symbol its manifest names (another file)."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    if manifest.get("symbol") and manifest["symbol"] not in text:
        raise ArtifactError(f"{str(path)!r} does not define {manifest['symbol']!r}, "
                            "the symbol its manifest names")
