"""A TFLite flatbuffer built op by op (issue 43): tensors, constant buffers, builtin operators.

Written with the TFLite schema's generated Python code (the ``tflite`` package: TensorFlow
2.18's own ``schema.fbs`` compiled by ``flatc``, packaged by zhenhuaw-me/tflite) and Google's
``flatbuffers`` builder, not with litert-torch 0.10 (``pip install --dry-run`` here: 25 more
packages, jax and jaxlib among them, and typing_extensions downgraded): the builder's output is
a pure function of the calls made, so the same graph gives the same bytes (an export is a
reproducible build), and every op is the one chosen here (what the target's op resolver has),
not what a converter picked. ``edgepe.formats.tflite`` holds what each scheme's graph is made
of.

Layout rules the interpreters rely on: buffer 0 is the empty sentinel (TFLite's convention:
tensors without data point at it), constant data is 16-byte aligned (TFLM reads int8/int32/
float32 constants in place), the file identifier is ``TFL3`` and the schema version 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

SCHEMA_VERSION = 3
IDENTIFIER = b"TFL3"
# TensorType enum of schema.fbs (the subset edgepe writes).
TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int32): 2,
         np.dtype(np.uint8): 3, np.dtype(np.int64): 4, np.dtype(np.int8): 9}
TYPE_NAMES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 9: "int8"}
DATA_ALIGNMENT = 16


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    buffer: int = 0
    scale: tuple[float, ...] | None = None
    zero_point: tuple[int, ...] | None = None
    axis: int = 0


@dataclass
class Op:
    name: str  # BuiltinOperator name, e.g. "FULLY_CONNECTED"
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: tuple[str, dict[str, Any]] | None = None  # (BuiltinOptions name, fields)


@dataclass
class Graph:
    """One subgraph being built; ``serialize()`` gives the model's bytes."""

    tensors: list[Tensor] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=lambda: [b""])
    ops: list[Op] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def tensor(self, name: str, shape, dtype, scale=None, zero_point=None, axis: int = 0) -> int:
        self.tensors.append(Tensor(name, tuple(int(d) for d in shape), np.dtype(dtype), 0,
                                   None if scale is None else tuple(float(s) for s in scale),
                                   None if zero_point is None
                                   else tuple(int(z) for z in zero_point), axis))
        return len(self.tensors) - 1

    def const(self, name: str, value, dtype=None, scale=None, zero_point=None,
              axis: int = 0) -> int:
        array = np.ascontiguousarray(value if dtype is None else np.asarray(value, dtype=dtype))
        index = self.tensor(name, array.shape, array.dtype, scale, zero_point, axis)
        self.buffers.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
        self.tensors[index].buffer = len(self.buffers) - 1
        return index

    def input(self, name: str, shape, dtype) -> int:
        index = self.tensor(name, shape, dtype)
        self.inputs.append(index)
        return index

    def op(self, name: str, inputs, out_shape, out_dtype, options=None, out_name=None,
           scale=None, zero_point=None) -> int:
        out = self.tensor(out_name or f"{name.lower()}_{len(self.ops)}", out_shape, out_dtype,
                          scale, zero_point)
        self.ops.append(Op(name, tuple(inputs), (out,), options))
        return out

    def shape_of(self, index: int) -> tuple[int, ...]:
        return self.tensors[index].shape

    def serialize(self, description: str) -> bytes:
        import flatbuffers
        import tflite

        b = flatbuffers.Builder(1024)
        ints = _int_vector(b)

        # Operator codes, in first-use order.
        names: list[str] = []
        for op in self.ops:
            if op.name not in names:
                names.append(op.name)
        codes = []
        for name in names:
            code = getattr(tflite.BuiltinOperator, name)
            tflite.OperatorCodeStart(b)
            # Codes past 127 live in builtin_code; the deprecated int8 field says 127 then
            # (schema.fbs: PLACEHOLDER_FOR_GREATER_OP_CODES).
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, 1)
            codes.append(tflite.OperatorCodeEnd(b))
        code_vec = _table_vector(b, codes)

        tensors = []
        for t in self.tensors:
            tname = b.CreateString(t.name)
            shape = ints(t.shape)
            quant = None
            if t.scale is not None:
                scale = _float_vector(b, t.scale)
                zero = _int64_vector(b, t.zero_point or (0,) * len(t.scale))
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, scale)
                tflite.QuantizationParametersAddZeroPoint(b, zero)
                tflite.QuantizationParametersAddQuantizedDimension(b, t.axis)
                quant = tflite.QuantizationParametersEnd(b)
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, TYPES[t.dtype])
            tflite.TensorAddBuffer(b, t.buffer)
            tflite.TensorAddName(b, tname)
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            tensors.append(tflite.TensorEnd(b))
        tensor_vec = _table_vector(b, tensors)

        operators = []
        for op in self.ops:
            options = _options(b, op.options) if op.options else None
            in_vec, out_vec = ints(op.inputs), ints(op.outputs)
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, names.index(op.name))
            tflite.OperatorAddInputs(b, in_vec)
            tflite.OperatorAddOutputs(b, out_vec)
            if options is not None:
                tflite.OperatorAddBuiltinOptionsType(b, options[0])
                tflite.OperatorAddBuiltinOptions(b, options[1])
            operators.append(tflite.OperatorEnd(b))
        op_vec = _table_vector(b, operators)

        in_vec, out_vec = ints(self.inputs), ints(self.outputs)
        sg_name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensor_vec)
        tflite.SubGraphAddInputs(b, in_vec)
        tflite.SubGraphAddOutputs(b, out_vec)
        tflite.SubGraphAddOperators(b, op_vec)
        tflite.SubGraphAddName(b, sg_name)
        subgraph = tflite.SubGraphEnd(b)
        sg_vec = _table_vector(b, [subgraph])

        buffers = []
        for data in self.buffers:
            vec = None
            if data:
                b.StartVector(1, len(data), DATA_ALIGNMENT)
                b.head -= len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vec = b.EndVector()
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))
        buf_vec = _table_vector(b, buffers)

        desc = b.CreateString(description)
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, SCHEMA_VERSION)
        tflite.ModelAddOperatorCodes(b, code_vec)
        tflite.ModelAddSubgraphs(b, sg_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, buf_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=IDENTIFIER)
        return bytes(b.Output())


def _int_vector(b):
    def make(values) -> int:
        values = list(values)
        b.StartVector(4, len(values), 4)
        for v in reversed(values):
            b.PrependInt32(int(v))
        return b.EndVector()
    return make


def _int64_vector(b, values) -> int:
    b.StartVector(8, len(values), 8)
    for v in reversed(values):
        b.PrependInt64(int(v))
    return b.EndVector()


def _float_vector(b, values) -> int:
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependFloat32(float(v))
    return b.EndVector()


def _table_vector(b, offsets) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _options(b, options: tuple[str, dict[str, Any]]) -> tuple[int, int]:
    """``(BuiltinOptions union type, table offset)`` of ``("FullyConnectedOptions", {...})``:
    each field set through the schema's generated ``<Options>Add<Field>`` function."""
    import importlib

    import tflite

    kind, fields = options
    module = importlib.import_module(f"tflite.{kind}")
    getattr(module, f"{kind}Start")(b)
    for key, value in fields.items():
        getattr(module, f"{kind}Add{key}")(b, value)
    return getattr(tflite.BuiltinOptions, kind), getattr(module, f"{kind}End")(b)
