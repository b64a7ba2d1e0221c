"""Artifacts shaped as a model's own tensors (issue 29): what ``edgepe graft`` puts in place of the
PE subgraph it finds in a transformers export, so that the model reads exactly what it read.

``gathered_tables``: ``positions [..., 1] int -> out_k [..., W_k] float32``, rows of constant
``[L, W_k]`` tables gathered by position (RoPE's cos and sin, ``[cos(a) | cos(a)]`` with duplicated
halves as Hugging Face's ``rotate_half`` models consume them), no trigonometric op. With
``quantize='int8'`` each table is stored int8 with one scale per table (symmetric, ``max|t| / 127``)
and dequantised after the gather, so the rows cost a quarter of float32's bytes; the error is
at most half a step, ``scale / 2``, per value (``int8_tables`` returns it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgepe.contract.errors import BadParameterError

POSITIONS = "positions"


def int8_tables(tables: Mapping[str, np.ndarray]) -> dict[str, tuple[np.ndarray, float, float]]:
    """``{name: (int8 table, scale, bound)}``: symmetric per-table quantisation and its bound
    ``scale / 2`` (round to nearest; no clipping, as ``scale = max|t| / 127``)."""
    result = {}
    for name, table in tables.items():
        peak = float(np.abs(table).max(initial=0.0))
        scale = np.float32(peak / 127 if peak else 1.0)
        q = np.clip(np.rint(table.astype(np.float64) / float(scale)), -127, 127).astype(np.int8)
        result[name] = (q, float(scale), float(scale) / 2)
    return result


def gathered_tables(tables: Mapping[str, np.ndarray], opset: int, positions_shape: Sequence,
                    positions_type: int = TensorProto.INT64, squeeze: bool = True,
                    duplicate: bool = False, quantize: str = "none", ir_version: int = 8,
                    if_true: Mapping[str, np.ndarray] | None = None,
                    condition_shape: Sequence | None = None) -> onnx.ModelProto:
    """``positions [..., 1] -> {name: [..., W]}``: rows of each ``[L, W]`` table at ``positions``
    (``squeeze``: the trailing axis of 1 dropped, as Hugging Face's ``positions[..., None] *
    inv_freq`` has it; else ``[..., W]`` from ``positions [...]``; ``duplicate``: each row
    concatenated with itself, ``[..., 2W]``, so the table stores the halves once).
    ``positions_shape``: the dims of the model's positions tensor (int, name or None each).
    ``if_true``: a second set of tables, and a second input ``condition`` (bool, one element,
    of ``condition_shape``): each
    output is ``Where(condition, rows of if_true, rows of tables)`` (longrope's run-time choice).
    """
    dims = [d if d is not None else f"positions_{i}" for i, d in enumerate(positions_shape)]
    lead = dims[:-1] if squeeze else dims
    nodes, inits = [], []
    pos = POSITIONS
    if positions_type != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", [pos], ["positions_int64"], to=TensorProto.INT64))
        pos = "positions_int64"
    if squeeze:
        inits.append(numpy_helper.from_array(np.asarray([-1], np.int64), "last_axis"))
        nodes.append(helper.make_node("Squeeze", [pos, "last_axis"], ["positions_squeezed"]))
        pos = "positions_squeezed"
    outputs = []
    sets = [(tables, "")] + ([(if_true, "_if_true")] if if_true else [])
    for name, table in tables.items():
        picked = []
        for chosen, tag in sets:
            picked.append(_rows(nodes, inits, f"{name}{tag}", chosen[name], pos, duplicate,
                                quantize))
        if if_true:
            nodes.append(helper.make_node("Where", ["condition", picked[1], picked[0]], [name]))
        else:
            nodes[-1].output[:] = [name]
        width = table.shape[1] * (2 if duplicate else 1)
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [*lead, width]))
    inputs = [helper.make_tensor_value_info(POSITIONS, positions_type, dims)]
    if if_true:
        cond = [d if d is not None else f"condition_{i}"
                for i, d in enumerate(condition_shape or [])]
        inputs.append(helper.make_tensor_value_info("condition", TensorProto.BOOL, cond))
    graph = helper.make_graph(nodes, "model_tensors", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def _rows(nodes: list, inits: list, name: str, table: np.ndarray, pos: str, duplicate: bool,
          quantize: str) -> str:
    """Append the nodes that gather ``table``'s rows at ``pos`` (int8: dequantised; duplicate:
    each row concatenated with itself); returns the name of their result."""
    out = f"{name}_rows_out"
    rows = f"{name}_half" if duplicate else out
    if quantize == "int8":
        q, scale, _ = int8_tables({name: table})[name]
        inits += [numpy_helper.from_array(q, f"{name}_table_int8"),
                  numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_scale")]
        nodes += [helper.make_node("Gather", [f"{name}_table_int8", pos], [f"{name}_rows"],
                                   axis=0),
                  helper.make_node("DequantizeLinear", [f"{name}_rows", f"{name}_scale"],
                                   [rows])]
    else:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(table, np.float32),
                                             f"{name}_table"))
        nodes.append(helper.make_node("Gather", [f"{name}_table", pos], [rows], axis=0))
    if duplicate:
        nodes.append(helper.make_node("Concat", [rows, rows], [out], axis=-1))
    return out


def alibi_bias(slopes: np.ndarray, opset: int, positions_shape: Sequence,
               positions_type: int = TensorProto.INT64, ir_version: int = 8) -> onnx.ModelProto:
    """``positions [B, 1, T] int -> bias [B, H, T]``: ``slopes [H, 1] * float32(positions)``, the
    ALiBi bias of key positions as Bloom builds it (before its ``[B * H, 1, T]`` reshape)."""
    dims = [d if d is not None else f"positions_{i}" for i, d in enumerate(positions_shape)]
    heads = slopes.shape[0]
    nodes = [helper.make_node("Cast", [POSITIONS], ["positions_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["slopes", "positions_float"], ["bias"])]
    graph = helper.make_graph(
        nodes, "alibi_bias", [helper.make_tensor_value_info(POSITIONS, positions_type, dims)],
        [helper.make_tensor_value_info("bias", TensorProto.FLOAT, [dims[0], heads, dims[-1]])],
        [numpy_helper.from_array(np.ascontiguousarray(slopes, np.float32), "slopes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def alibi_distance_bias(slopes: np.ndarray, length: int, opset: int, ir_version: int = 8
                        ) -> onnx.ModelProto:
    """``() -> bias [H, 1, L]``: ``slopes [H] * (u - (L - 1))`` for ``u = 0 .. L-1``, MPT's ALiBi
    bias (``build_mpt_alibi_tensor``) computed from a Range instead of stored: ``H`` floats and
    four nodes in place of an ``[H, 1, L]`` constant."""
    heads = slopes.shape[0]
    inits = [numpy_helper.from_array(np.asarray(1 - length, np.int64), "start"),
             numpy_helper.from_array(np.asarray(1, np.int64), "end"),
             numpy_helper.from_array(np.asarray(1, np.int64), "step"),
             numpy_helper.from_array(np.ascontiguousarray(slopes, np.float32).reshape(heads, 1, 1),
                                     "slopes")]
    nodes = [helper.make_node("Range", ["start", "end", "step"], ["distance"]),
             helper.make_node("Cast", ["distance"], ["distance_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["slopes", "distance_float"], ["bias"])]
    graph = helper.make_graph(nodes, "alibi_distance_bias", [],
                              [helper.make_tensor_value_info("bias", TensorProto.FLOAT,
                                                             [heads, 1, length])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def sliced_rope(inv_freq: np.ndarray, widths: Sequence[int], names: Sequence[str], opset: int,
                positions_shape: Sequence, positions_type: int = TensorProto.INT64,
                attention: float = 1.0, lowering: str = "bitwise",
                ir_version: int = 8) -> onnx.ModelProto:
    """``positions [..., 1] -> cos, sin [..., 2k]``: RoPE's ``[cos(p w) | cos(p w)] a`` (and
    sin) as Hugging Face's ``rotate_half`` models consume them, with no trigonometric op and no
    table of positions: ``graphs.sliced.cos_sin`` from the position's bit slices and small
    per-slice tables (issue 34), within ``graphs.sliced.bound(widths, a)`` of the float64
    definition at every position the slices hold. ``names``: the two outputs (cos, sin)."""
    from edgepe.graphs._common import Graph
    from edgepe.graphs.sliced import cos_sin

    k = len(inv_freq)
    dims = [d if d is not None else f"positions_{i}" for i, d in enumerate(positions_shape)]
    g = Graph("model_tensors_sliced")
    pos = POSITIONS
    if positions_type != TensorProto.INT64:
        pos = g.op("Cast", pos, to=TensorProto.INT64)
    pos = g.op("Squeeze", pos, g.const([-1], np.int64, "last_axis"))
    scale = None if attention == 1.0 else np.full(k, attention, np.float32)
    cos, sin = cos_sin(g, pos, np.asarray(inv_freq, np.float32), widths, scale, lowering)
    outputs = []
    for half, name in zip((cos, sin), names, strict=True):
        g.op("Concat", half, half, out=name, axis=-1)
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                     [*dims[:-1], 2 * k]))
    inputs = [helper.make_tensor_value_info(POSITIONS, positions_type, dims)]
    graph = helper.make_graph(g.nodes, "model_tensors_sliced", inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


# float32's exact integers (edgepe.schemes._registry.FLOAT_EXACT_POSITIONS, a layer above)
EXACT_POSITIONS = 1 << 24


def recipe_distance(inv_freq: np.ndarray, max_len: int, attention: float = 1.0,
                    chunk: int = 1 << 15) -> float:
    """Max ``|recipe - definition|`` over positions ``0 .. max_len - 1``: how far the model's own
    float32 cos/sin (the float32 angle ``p * w``, then cos/sin rounded to float32, times ``a`` in
    float32) are from the float64 definition ``a cos(p w)`` that the sliced graph approximates.
    Positions are float32 here, exact up to ``EXACT_POSITIONS``: a ``max_len`` past it is a
    ``BadParameterError`` (issue 41: graft's ``--max-len 2^63`` looped here 2^48 times)."""
    if max_len > EXACT_POSITIONS:
        raise BadParameterError(f"--max-len {max_len}: a RoPE's positions are float32, exact up "
                                f"to {EXACT_POSITIONS} (2^24); give at most that")
    w = np.asarray(inv_freq, np.float32)
    worst = 0.0
    for start in range(0, max_len, chunk):
        p = np.arange(start, min(start + chunk, max_len), dtype=np.float32)[:, None]
        angle32 = p * w[None, :]
        exact = p.astype(np.float64) * w.astype(np.float64)[None, :]
        for f in (np.cos, np.sin):
            recipe = f(angle32.astype(np.float64)).astype(np.float32) * np.float32(attention)
            gap = np.abs(recipe.astype(np.float64) - attention * f(exact)).max(initial=0.0)
            worst = max(worst, float(gap))
    return worst
