"""Target profiles as data: what each runtime runs, from its published operator table.

One ``Profile`` per target, listed in ``PROFILES`` (the registry's source of truth, STYLE 2). A
profile says, for every op it runs, the element types that op's data tensors may have (inputs
and outputs alike; the index and shape operands that ``check.SHAPE_OPERANDS`` names are checked
against ``index_dtypes`` instead), the opset range, and the rules the runtime adds. Each cites
the table and version it came from (``source``); docs/readme/targets.md keeps the table of
evidence. The ops listed are those edgepe's graphs use (``edgepe.graphs``, ``edgepe.graphs.quant``);
an op a profile does not list is reported as not in that runtime's table, so a contributor adds
a target or an op here, and no builder changes.

Where this machine can run the target (``executed``), the tests run every artifact the profile
accepts there (tests/test_targets.py, tests/test_openvino.py); the others are checked statically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

F32 = frozenset({"float32"})
FLOATS = frozenset({"float32", "float16"})
I32 = frozenset({"int32"})
I64 = frozenset({"int64"})
SIGNED = frozenset({"int8", "int16", "int32", "int64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS = SIGNED | UNSIGNED
NUMERIC = FLOATS | frozenset({"float64"}) | INTS
ALL = NUMERIC | frozenset({"bool"})
BOOL = frozenset({"bool"})

# Rules a profile may name (``check.py`` implements each).
RULES = {
    "no-uint64-initializers": "uint64 initializers are rejected",
    "nonnegative-gather-indices": "Gather indices must be >= 0 (constant, or clamped)",
    "static-shapes": "graph inputs need fixed shapes (a note: fix N before deploying, e.g. "
                     "python -m onnxruntime.tools.make_dynamic_shape_fixed)",
}


@dataclass(frozen=True)
class Profile:
    """A runtime's operator support, as published. ``ops``: op type (``domain.Op`` outside the
    default domain) -> element types its data tensors may have."""

    name: str
    runtime: str
    source: str  # the operator table (URL) and the version it describes
    opsets: tuple[int, int]
    ops: Mapping[str, frozenset[str]]
    index_dtypes: frozenset[str] = frozenset({"int32", "int64"})
    rules: tuple[str, ...] = ()
    executed: str | None = None  # how the test suite runs it on this machine, if it can
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        assert set(self.rules) <= set(RULES), self.rules


def _ops(**groups: frozenset[str]) -> dict[str, frozenset[str]]:
    return dict(groups)


# The onnxruntime tables below were read, row by row for every op edgepe writes, from one
# stored version of docs/OperatorKernels.md (generated from the registered kernels; the CPU,
# CUDA and DML sections): microsoft/onnxruntime@001d12d2623fd411ce0f83d05abb5e82304a3389.
ORT_KERNELS = ("onnxruntime docs/OperatorKernels.md @ 001d12d2623fd411ce0f83d05abb5e82304a3389 "
               "(https://github.com/microsoft/onnxruntime/blob/001d12d2623fd411ce0f83d05abb5e82304a3"
               "389/docs/OperatorKernels.md)")

# onnxruntime CPUExecutionProvider: that table's CPU section, newest row of each op (the
# installed 1.32 runs every artifact the profile accepts in the tests). Cos is float only
# (Sin float/double); Equal/Less/Greater/Size have no float16 kernel; Where takes
# float/double/int32/int64/uint8 (and bool conditions) only.
ORT_CPU = Profile(
    name="ort-cpu",
    runtime="onnxruntime CPUExecutionProvider",
    source=f"{ORT_KERNELS}, CPUExecutionProvider section; executed with onnxruntime 1.32",
    opsets=(7, 25),
    ops=_ops(
        Abs=NUMERIC - {"float16"}, Add=NUMERIC - {"float16"}, Sub=NUMERIC - {"float16"},
        Mul=NUMERIC - {"float16"}, Div=NUMERIC - {"float16"}, Mod=NUMERIC,
        Neg=frozenset({"float32", "float64", "int8", "int16", "int32", "int64"}),
        BitShift=frozenset({"uint8", "uint32", "uint64"}),
        BitwiseAnd=INTS, BitwiseOr=INTS, BitwiseXor=INTS, BitwiseNot=INTS,
        Cast=ALL, Clip=NUMERIC - {"int16", "uint16"}, Concat=ALL, Expand=ALL, Gather=ALL,
        Reshape=ALL, Transpose=ALL, Unsqueeze=ALL, Squeeze=ALL, Slice=ALL, Split=ALL,
        Identity=ALL, Where=frozenset({"float32", "float64", "int32", "int64", "uint8"}) | BOOL,
        Equal=ALL - {"float16"}, Less=NUMERIC - {"float16"} | BOOL,
        Greater=NUMERIC - {"float16"} | BOOL,
        Max=frozenset({"float32", "float16", "float64", "int8", "int32", "int64", "uint8",
                       "uint32", "uint64"}),
        Range=frozenset({"float32", "float64", "int16", "int32", "int64"}),
        Shape=ALL, Size=ALL - {"float16"},
        Floor=frozenset({"float32", "float64"}), Sin=frozenset({"float32", "float64"}),
        Cos=F32, Gemm=frozenset({"float32", "float64"}),
        MatMul=frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"}),
        MatMulInteger=frozenset({"uint8", "int8", "int32"}),
        DequantizeLinear=frozenset({"int8", "uint8", "int16", "uint16", "int32"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8", "int16", "uint16"}) | FLOATS,
        RotaryEmbedding=FLOATS | I64, **{"com.microsoft.RotaryEmbedding": FLOATS | I64},
    ),
    executed="onnxruntime CPU (every test that runs a graph)",
)

# onnxruntime CUDAExecutionProvider: the same table's CUDA section. No BitShift or Bitwise*
# kernel at all (DESIGN.md: those nodes fall back to the CPU, with copies). Mod, Equal, Less,
# Greater and Max take float16/32/64, int32/64 and uint32/64 only (no 8- or 16-bit integers).
CUDA_COMPARE = FLOATS | frozenset({"float64", "int32", "int64", "uint32", "uint64"})
ORT_CUDA = Profile(
    name="ort-cuda",
    runtime="onnxruntime CUDAExecutionProvider",
    source=f"{ORT_KERNELS}, CUDAExecutionProvider section: no BitShift, BitwiseAnd/Or/Xor/Not "
           "kernels; MatMulInteger int8 x int8 only",
    opsets=(7, 25),
    ops=_ops(
        Abs=NUMERIC, Add=NUMERIC, Sub=NUMERIC, Mul=NUMERIC, Div=NUMERIC, Mod=CUDA_COMPARE,
        Neg=frozenset({"float32", "float64", "float16", "int8", "int16", "int32", "int64"}),
        Cast=ALL, Clip=FLOATS | frozenset({"float64", "int8", "uint8", "int64", "uint64"}),
        Concat=ALL, Expand=ALL, Gather=ALL, Reshape=ALL, Transpose=ALL, Unsqueeze=ALL,
        Squeeze=ALL, Slice=ALL, Split=ALL, Identity=ALL,
        Where=frozenset({"uint8", "int32", "int64", "float32", "float64", "float16", "bool"}),
        Equal=CUDA_COMPARE | BOOL, Less=CUDA_COMPARE | BOOL, Greater=CUDA_COMPARE | BOOL,
        Max=CUDA_COMPARE, Range=frozenset({"float32", "float64", "int16", "int32", "int64"}),
        Shape=ALL, Size=ALL,
        Floor=FLOATS | {"float64"}, Sin=FLOATS | {"float64"}, Cos=FLOATS | {"float64"},
        Gemm=FLOATS | {"float64"}, MatMul=FLOATS | {"float64"},
        MatMulInteger=frozenset({"int8", "int32"}),
        DequantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        RotaryEmbedding=FLOATS | I64, **{"com.microsoft.RotaryEmbedding": FLOATS | I64},
    ),
    notes=("a node without a CUDA kernel falls back to the CPU provider: `edgepe verify "
           "--providers cuda --strict-placement` on a GPU proves none did",),
)

# onnxruntime DmlExecutionProvider (DirectML, Windows): the same table's DML section. It
# registers BitShift (uint8-uint64) and BitwiseAnd/Or/Xor/Not (all integers), but no double
# arithmetic, Abs only on signed types, and Mod on 8/16/32-bit integers and floats only (no
# int64: `--lowering arith` does not run there). Only com.microsoft.RotaryEmbedding, not the
# opset-23 one. Its newest registrations are opset 21 ("21+", open-ended, as the CPU rows);
# the table says nothing of an opset 27 limit, so the range is the one the other two have.
DML_INTS = FLOATS | INTS
DIRECTML = Profile(
    name="directml",
    runtime="onnxruntime DmlExecutionProvider",
    source=f"{ORT_KERNELS}, DmlExecutionProvider section",
    opsets=(7, 25),
    ops=_ops(
        Abs=FLOATS | SIGNED, Add=DML_INTS, Sub=DML_INTS, Mul=DML_INTS, Div=DML_INTS,
        Mod=FLOATS | frozenset({"int8", "int16", "int32", "uint8", "uint16", "uint32"}),
        Neg=FLOATS | SIGNED, BitShift=UNSIGNED, BitwiseAnd=INTS, BitwiseOr=INTS,
        BitwiseXor=INTS, BitwiseNot=INTS, Cast=ALL, Clip=DML_INTS, Concat=ALL, Expand=ALL,
        Gather=ALL, Reshape=ALL, Transpose=ALL, Unsqueeze=ALL, Squeeze=ALL, Slice=ALL,
        Split=ALL, Identity=ALL, Where=ALL, Equal=DML_INTS | BOOL, Less=DML_INTS | BOOL,
        Greater=DML_INTS | BOOL, Max=DML_INTS,
        Range=frozenset({"float32", "int16", "int32", "int64"}), Shape=ALL, Size=ALL,
        Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS,
        MatMul=FLOATS, MatMulInteger=frozenset({"uint8", "int8", "int32"}),
        DequantizeLinear=frozenset({"int8", "uint8", "int32"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        **{"com.microsoft.RotaryEmbedding": FLOATS | I64},
    ),
    notes=("DequantizeLinear of int32 is registered for opsets 10-20 only (edgepe's int8 "
           "graphs are opset 19)",),
)

# TensorRT 10.x through onnx-tensorrt: docs/operators.md at onnx/onnx-tensorrt@96e78110 (main,
# 2024-06-17: "TensorRT 10.0 supports operators in the inclusive range of opset 9 to opset
# 20"; "UINT8 is only supported as network input or output tensor types"). Per row: no
# BitShift, Bitwise*, MatMulInteger; Clip FP32/FP16/BF16 only; Cast also UINT8 and BOOL; no
# INT8 data outside Q/DQ (INT8 is a quantized type there); DequantizeLinear INT8 input;
# uint64 is not a TensorRT type. Equal/Less/Greater list no BOOL input: bool is their output.
TRT_ARITH = FLOATS | I32 | I64
TRT_MOVE = TRT_ARITH | BOOL
TENSORRT = Profile(
    name="tensorrt",
    runtime="TensorRT 10.x (onnx-tensorrt parser; also onnxruntime's TensorRT provider)",
    source="onnx-tensorrt docs/operators.md @ 96e781103cfc4adf4a6bb557e94bac8e693f6f4c "
           "(TensorRT 10.0; https://github.com/onnx/onnx-tensorrt/blob/96e781103cfc4adf4a6bb557"
           "e94bac8e693f6f4c/docs/operators.md)",
    opsets=(9, 20),
    ops=_ops(
        Abs=TRT_ARITH, Add=TRT_ARITH, Sub=TRT_ARITH, Mul=TRT_ARITH, Div=TRT_ARITH,
        Mod=TRT_ARITH, Neg=TRT_ARITH, Max=TRT_ARITH, Range=TRT_ARITH,
        Cast=TRT_MOVE | {"uint8"}, Clip=FLOATS, Concat=TRT_MOVE, Expand=TRT_MOVE,
        Gather=TRT_MOVE, Reshape=TRT_MOVE, Transpose=TRT_MOVE, Unsqueeze=TRT_MOVE,
        Squeeze=TRT_MOVE, Slice=TRT_MOVE, Split=TRT_MOVE, Identity=TRT_MOVE, Where=TRT_MOVE,
        Shape=TRT_MOVE, Size=TRT_MOVE, Equal=TRT_MOVE, Less=TRT_MOVE, Greater=TRT_MOVE,
        Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS, MatMul=FLOATS,
        DequantizeLinear=frozenset({"int8"}) | FLOATS,
        QuantizeLinear=frozenset({"int8"}) | FLOATS,
    ),
    rules=("no-uint64-initializers",),
    notes=("uint8 only as a network input or output tensor type",),
)

# OpenVINO 2026.4 CPU plugin through its ONNX frontend. The frontend registers every op edgepe
# writes, BitShift, Bitwise*, Mod, Max, Range, Shape and Size included (ops_bridge.cpp below);
# what the CPU plugin computes exactly was measured here (tests/test_openvino.py): int64 and
# uint64 arithmetic runs in 32 bits (positions past 2^31 wrong: int64 BitShift/BitwiseAnd/Mod/
# Div), int32 Mod/Div lose exactness past 2^24 (as if computed in float32), and a float Div by a
# constant becomes a Mul by its reciprocal (1 ulp off the reference: integer-multiscale 0.0039
# at |pos| ~ 1.6e7). So those are not listed; ops that compare, select or move int64 values
# are: the table graphs' int64 clamps pass the verifier's probe at int64's extremes on it.
# Max, Range, Shape and Size are not listed: no test here measures them on the CPU plugin.
OV_DATA = NUMERIC | BOOL
OPENVINO = Profile(
    name="openvino",
    runtime="OpenVINO 2026.4 CPU plugin (ONNX frontend)",
    source="OpenVINO ONNX frontend op registry, src/frontends/onnx/frontend/src/ops_bridge.cpp "
           "@ 00344809d8e398c1631f671bd90f30e6aa44f77e (openvinotoolkit/openvino); "
           "int64/int32/Div limits measured here with openvino 2026.4.1 (tests/test_openvino.py)",
    opsets=(7, 25),
    ops=_ops(
        Abs=FLOATS, Add=FLOATS | I32, Sub=FLOATS | I32, Mul=FLOATS | I32, Neg=FLOATS,
        Cast=OV_DATA, Clip=FLOATS, Concat=OV_DATA, Expand=OV_DATA, Gather=OV_DATA,
        Reshape=OV_DATA, Transpose=OV_DATA, Unsqueeze=OV_DATA, Squeeze=OV_DATA,
        Slice=OV_DATA, Split=OV_DATA, Identity=OV_DATA, Where=OV_DATA, Equal=OV_DATA,
        Less=OV_DATA, Greater=OV_DATA, Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS,
        MatMul=FLOATS,
    ),
    executed="OpenVINO CPU, INFERENCE_PRECISION_HINT=f32 (pip install 'edgepe[openvino]')",
)

# Qualcomm QNN (HTP/NPU) through onnxruntime's QNN provider. Ops: the builders registered in
# onnxruntime/core/providers/qnn/builder/op_builder_factory.cc @ 00cd7c6df0a66cd628a5ab7e682c
# b870134a27ee: no BitShift, Bitwise* (logical And/Or/Not only), Identity, Range, Shape, Size
# or RotaryEmbedding. Mod is registered but not listed: mod_op_builder.cc @ 35aacac653343d2473b
# 7aa63e49a7cbdf6a75098 refuses float Mod (fmod=0) and computes integer Mod as a - b*floor(a/b)
# after casting to float32, inexact past 2^24 where arith32 promises 2^31. int64: the provider
# casts int64 graph inputs and initializers to int32 (BaseOpBuilder::ProcessInt64Tensors,
# onnxruntime PR #24351, merged 2025-04), so ops that move or cast the positions take int64;
# int64 arithmetic is not listed. Element types per op come from Qualcomm's HTP op definitions,
# which are not public source: the type cells below are NOT checked cell by cell (the provider
# maps ONNX types to QNN types one to one, qnn_model_wrapper.cc; what HTP accepts per op is
# Qualcomm's "Supported ONNX Ops" / HTP op-def tables). The provider's newer home,
# onnxruntime/onnxruntime-qnn, adds Range, Shape, Size and RotaryEmbedding builders and lowers
# integer Mod to QNN's ElementWiseMod (mod_op_builder.cc @ 0f5c46fd): not profiled here, since
# whether HTP computes it exactly on int32 is again in Qualcomm's op definitions.
QNN_DATA = FLOATS | I32 | frozenset({"uint8", "int8", "bool"})
QNN_MOVE = QNN_DATA | I64
QNN = Profile(
    name="qnn",
    runtime="onnxruntime QNNExecutionProvider (Qualcomm AI Engine Direct, HTP)",
    source="onnxruntime onnxruntime/core/providers/qnn/builder/op_builder_factory.cc @ "
           "00cd7c6df0a66cd628a5ab7e682cb870134a27ee (ops), opbuilder/mod_op_builder.cc @ "
           "35aacac653343d2473b7aa63e49a7cbdf6a75098, PR #24351 (int64 -> int32); element types "
           "not verified (Qualcomm HTP op definitions)",
    opsets=(7, 21),
    ops=_ops(
        Abs=FLOATS | I32, Add=FLOATS | I32, Sub=FLOATS | I32, Mul=FLOATS | I32,
        Div=FLOATS | I32, Neg=FLOATS | I32, Max=FLOATS | I32, Cast=QNN_MOVE,
        Clip=FLOATS | I32, Concat=QNN_DATA, Expand=QNN_DATA, Gather=QNN_MOVE,
        Reshape=QNN_MOVE, Transpose=QNN_DATA, Unsqueeze=QNN_MOVE, Squeeze=QNN_MOVE,
        Slice=QNN_DATA, Split=QNN_DATA, Where=QNN_DATA, Equal=QNN_DATA, Less=QNN_DATA,
        Greater=QNN_DATA, Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS, MatMul=FLOATS,
        DequantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
    ),
    index_dtypes=I32,
    rules=("nonnegative-gather-indices", "static-shapes"),
    notes=("int64 appears only as the graph input: the provider casts int64 inputs to int32 "
           "(onnxruntime PR #24351; positions beyond +-2^31 do not survive)",
           "per-op element types not verified against Qualcomm's HTP op definitions"),
)

# Apple CoreML through onnxruntime's CoreML provider. Ops: the stored version of
# onnxruntime/core/providers/coreml/builders/op_builder_factory.cc that registers Gather, Max,
# Shape and Unsqueeze (index id 3076644166; no Floor, Sin, Cos, Mod, Where, comparisons or
# Neg there). Builders for Mod (impl/mod_op_builder.cc @ a812bb4d: int32/float/float16,
# fmod=0, ML Program), Where (@ 99549743) and Equal (@ f6974692) exist in newer sources, but no
# stored factory registering them was found, so they are not listed. Input types: the base
# builder accepts float32 input 0 unless a builder overrides it (impl/base_op_builder.cc @
# 749c75cb); the ML Program int32 cells are NOT verified cell by cell. int64 positions: CoreML
# tensors are int32 at the partition boundary (equal_op_builder.cc's comment; cast_op_builder
# turns an int64->int32 Cast into identity).
COREML = Profile(
    name="coreml",
    runtime="onnxruntime CoreMLExecutionProvider (ML Program)",
    source="onnxruntime onnxruntime/core/providers/coreml/builders/op_builder_factory.cc "
           "(stored version registering Gather/Max/Shape/Unsqueeze) and impl/*_op_builder.cc; "
           "int32 cells not verified",
    opsets=(7, 21),
    ops=_ops(
        Add=FLOATS | I32, Sub=FLOATS | I32, Mul=FLOATS | I32, Div=FLOATS, Max=FLOATS,
        Round=FLOATS, Cast=FLOATS | I32 | I64 | BOOL, Clip=FLOATS, Concat=FLOATS | I32,
        Gather=FLOATS | I32, Reshape=FLOATS | I32, Shape=FLOATS | I32 | I64,
        Transpose=FLOATS | I32, Unsqueeze=FLOATS | I32 | I64, Squeeze=FLOATS | I32,
        Slice=FLOATS | I32, Split=FLOATS, Gemm=FLOATS, MatMul=FLOATS,
    ),
    index_dtypes=I32,
    notes=("int64 inputs are int32 inside the CoreML partition (positions beyond +-2^31 do "
           "not survive)", "ML Program int32 element types not verified per op"),
)

# Android NNAPI through onnxruntime's NNAPI provider: builders registered in
# onnxruntime/core/providers/nnapi/nnapi_builtin/builders/op_builder_factory.cc @ 07e8de2f.
# BaseOpBuilder::HasSupportedInputOutputsImpl (impl/base_op_builder.cc @ 194144df) accepts a
# float32 input 0 only, and the builders of the ops below do not widen it except for
# quantized (QDQ/QLinear) uint8 forms: Add/Sub/Mul/Div run on float32 only
# (impl/binary_op_builder.cc), Cast only from float32, to float32 or int32. ModelBuilder::
# RegisterModelInputs takes float32 (or quantized uint8) graph inputs only: an int64 (or int32)
# positions input cannot enter an NNAPI partition, so no compute graph runs on it whole. Gather
# takes int32 indices, or constant indices of another type (converted at build time).
# Sin but no Cos; Floor but no Mod; no comparisons, Where, Expand or bitwise ops. Opsets: the
# base builder refuses a node whose schema is newer than 19 (impl/base_op_builder.h @ b6a9927f,
# GetMaxSupportedOpSet).
NNAPI = Profile(
    name="nnapi",
    runtime="onnxruntime NnapiExecutionProvider (Android NNAPI)",
    source="onnxruntime onnxruntime/core/providers/nnapi/nnapi_builtin/builders/"
           "op_builder_factory.cc @ 07e8de2f519d077b8a3360b4ec886433624f5432 (ops); "
           "impl/base_op_builder.cc @ 194144dfd419cbee29d18e57bed734fc883ae833 and "
           "impl/cast_op_builder.cc @ 47a77049 (types); impl/base_op_builder.h @ b6a9927f "
           "(opsets)",
    opsets=(7, 19),
    ops=_ops(
        Abs=F32, Add=F32, Sub=F32, Mul=F32, Div=F32, Neg=F32, Max=F32,
        Cast=F32 | I32, Clip=F32, Concat=F32, Gather=F32, Identity=F32,
        Reshape=F32, Transpose=F32, Unsqueeze=F32, Squeeze=F32,
        Slice=F32, Sin=F32, Floor=F32, Gemm=F32, MatMul=F32,
        DequantizeLinear=frozenset({"uint8"}) | F32, QuantizeLinear=frozenset({"uint8"}) | F32,
    ),
    index_dtypes=I32,
    rules=("static-shapes",),
    notes=("graph inputs must be float32 (or quantized uint8): int64 positions are not "
           "narrowed by the provider",),
)

# XNNPACK through onnxruntime's XNNPACK provider: its kernel registry
# (xnnpack_execution_provider.cc @ 1b38b5828ef20f49ec4a388570205c1e28092200, RegisterKernels):
# Conv, ConvTranspose, MaxPool, AveragePool, Softmax, Resize, Gemm, MatMul and QLinear* only,
# float: no Transpose (a Transpose kernel source exists, nn/transpose.cc @ 01674dbe, but is not
# registered there) and no integer or elementwise-position op of edgepe's.
XNNPACK = Profile(
    name="xnnpack",
    runtime="onnxruntime XnnpackExecutionProvider",
    source="onnxruntime onnxruntime/core/providers/xnnpack/xnnpack_execution_provider.cc @ "
           "1b38b5828ef20f49ec4a388570205c1e28092200 (RegisterKernels)",
    opsets=(7, 21),
    ops=_ops(Gemm=F32, MatMul=F32),
    notes=("every other node runs on onnxruntime's CPU provider instead",),
)

PROFILES: dict[str, Profile] = {
    p.name: p for p in (ORT_CPU, ORT_CUDA, DIRECTML, TENSORRT, OPENVINO, QNN, COREML, NNAPI,
                        XNNPACK)
}
DEFAULT_TARGET = "ort-cpu"

# TFLite targets (issue 43): ``ops`` keys are TFLite builtin operator names (schema.fbs), checked
# node by node on the .tflite edgepe writes (edgepe.targets.tflite); ``opsets`` is the TFLite
# schema version. Kept apart from ``PROFILES``: those check ONNX graphs. Listed are the ops
# edgepe's .tflite graphs use (edgepe.formats.tflite), with the data types each runtime's kernel
# takes, as measured on the installed interpreters (tests/test_tflite.py runs every model the
# profile accepts on both).
I8 = frozenset({"int8"})
TFL_ANY = frozenset({"float32", "int8", "int32", "int64"})
LITERT = Profile(
    name="litert",
    runtime="LiteRT interpreter (builtin kernels)",
    source="LiteRT's builtin op resolver, tensorflow/lite/core/kernels/register.cc "
           "(BuiltinOpResolver: AddBuiltin for each BuiltinOperator, RIGHT_SHIFT and "
           "BITWISE_XOR included); executed with ai-edge-litert 2.3.0",
    opsets=(3, 3),
    ops=_ops(ADD=F32 | I32 | I64, SUB=F32 | I32 | I64, MUL=F32 | I32 | I64,
             MINIMUM=F32 | I32 | I64, MAXIMUM=F32 | I32 | I64, FLOOR=F32,
             FLOOR_DIV=F32 | I32, FLOOR_MOD=F32 | I32 | I64, RIGHT_SHIFT=I32 | I64,
             BITWISE_XOR=I32 | I64, DIV=F32, CONCATENATION=F32,
             CAST=TFL_ANY, GATHER=TFL_ANY, RESHAPE=TFL_ANY,
             TRANSPOSE=TFL_ANY, FULLY_CONNECTED=F32 | I8, QUANTIZE=F32 | I8,
             DEQUANTIZE=F32 | I8),
    index_dtypes=frozenset({"int32", "int64"}),
    executed="ai-edge-litert's Interpreter, builtin kernels without delegates",
)
# TFLM: every op its all-ops resolver registers (micro_mutable_op_resolver.h's Add* functions,
# tensorflow/tflite-micro @ 03c312b17dfae17a8ed7e21c5bdf66bb967a07cd: no RIGHT_SHIFT, no
# BITWISE_XOR), with the types its reference kernels take. Measured on tflite-micro
# 0.dev20261023 (its Python interpreter): FLOOR_DIV/FLOOR_MOD "Type 'INT32' is not supported";
# SUB/ADD on int64 "Type INT64 (4) not supported"; GATHER "Positions of type 'INT64' are not
# supported"; GATHER of int32 data "Type 'INT32' is not supported by gather"; "Didn't find op for
# builtin opcode 'RIGHT_SHIFT'" (and 'BITWISE_XOR').
TFLM = Profile(
    name="tflm",
    runtime="TensorFlow Lite Micro (reference kernels; CMSIS-NN replaces the int8 ones)",
    source="tflite-micro tensorflow/lite/micro/micro_mutable_op_resolver.h @ "
           "03c312b17dfae17a8ed7e21c5bdf66bb967a07cd (the Add* functions); types measured with "
           "tflite-micro 0.dev20261023182759",
    opsets=(3, 3),
    ops=_ops(ADD=F32 | I32, SUB=F32 | I32, MUL=F32 | I32 | I8, MINIMUM=F32 | I32 | I64 | I8,
             MAXIMUM=F32 | I32 | I64 | I8, FLOOR=F32, FLOOR_DIV=F32, FLOOR_MOD=F32,
             DIV=F32, CONCATENATION=F32,
             CAST=frozenset({"float32", "int8", "int32"}), GATHER=F32 | I8,
             RESHAPE=TFL_ANY, TRANSPOSE=frozenset({"float32", "int8", "int32"}),
             FULLY_CONNECTED=F32 | I8, QUANTIZE=F32 | I8, DEQUANTIZE=F32 | I8),
    index_dtypes=frozenset({"int32"}),
    rules=("static-shapes",),
    executed="tflite-micro's Python interpreter (reference kernels)",
)
TFLITE_PROFILES: dict[str, Profile] = {p.name: p for p in (LITERT, TFLM)}
