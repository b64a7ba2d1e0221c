"""Target profiles as data: what each runtime runs, from its published operator table.

One ``Profile`` per target, listed in ``PROFILES`` (the registry's source of truth, STYLE 2). A
profile says, for every op it runs, the element types that op's data tensors may have (inputs
and outputs alike; the index and shape operands that ``check.SHAPE_OPERANDS`` names are checked
against ``index_dtypes`` instead), the opset range, and the rules the runtime adds. Each cites
the table and version it came from (``source``); docs/readme/targets.md keeps the table of
evidence. The ops listed are those edgepe's graphs use (``edgepe.export.graphs``, ``edgepe.quant``);
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


# onnxruntime CPUExecutionProvider: docs/OperatorKernels.md (onnxruntime main, checked against
# the installed 1.32, which runs every artifact the profile accepts in the tests).
ORT_CPU = Profile(
    name="ort-cpu",
    runtime="onnxruntime CPUExecutionProvider",
    source="onnxruntime docs/OperatorKernels.md, CPUExecutionProvider section (onnxruntime "
           "1.32; https://github.com/microsoft/onnxruntime/blob/main/docs/OperatorKernels.md)",
    opsets=(7, 25),
    ops=_ops(
        Abs=NUMERIC - {"float16"}, Add=NUMERIC - {"float16"}, Sub=NUMERIC - {"float16"},
        Mul=NUMERIC - {"float16"}, Div=NUMERIC - {"float16"}, Mod=NUMERIC,
        Neg=frozenset({"float32", "float64", "int8", "int16", "int32", "int64"}),
        BitShift=frozenset({"uint8", "uint32", "uint64"}),
        BitwiseAnd=INTS, BitwiseOr=INTS, BitwiseXor=INTS, BitwiseNot=INTS,
        Cast=ALL, Clip=NUMERIC - {"int16", "uint16"}, Concat=ALL, Expand=ALL, Gather=ALL,
        Reshape=ALL, Transpose=ALL, Unsqueeze=ALL, Squeeze=ALL, Slice=ALL, Split=ALL,
        Identity=ALL, Where=ALL, Equal=ALL, Less=NUMERIC | BOOL, Greater=NUMERIC | BOOL,
        Floor=frozenset({"float32", "float64"}), Sin=frozenset({"float32", "float64"}),
        Cos=frozenset({"float32", "float64"}), Gemm=frozenset({"float32", "float64"}),
        MatMul=frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"}),
        MatMulInteger=frozenset({"uint8", "int8", "int32"}),
        DequantizeLinear=frozenset({"int8", "uint8", "int16", "uint16", "int32"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        RotaryEmbedding=FLOATS | I64, **{"com.microsoft.RotaryEmbedding": FLOATS | I64},
    ),
    executed="onnxruntime CPU (every test that runs a graph)",
)

# onnxruntime CUDAExecutionProvider: the same table's CUDA section. No BitShift or Bitwise*
# kernel at all (DESIGN.md: those nodes fall back to the CPU, with copies). Mod, Equal, Less and
# Greater take float16/32/64, int32/64 and uint32/64 only (no 8- or 16-bit integers).
CUDA_COMPARE = FLOATS | frozenset({"float64", "int32", "int64", "uint32", "uint64"})
ORT_CUDA = Profile(
    name="ort-cuda",
    runtime="onnxruntime CUDAExecutionProvider",
    source="onnxruntime docs/OperatorKernels.md, CUDAExecutionProvider section (onnxruntime "
           "1.32): no BitShift, BitwiseAnd/Or/Xor/Not kernels; MatMulInteger int8 x int8 only",
    opsets=(7, 25),
    ops=_ops(
        Abs=NUMERIC, Add=NUMERIC, Sub=NUMERIC, Mul=NUMERIC, Div=NUMERIC, Mod=CUDA_COMPARE,
        Neg=frozenset({"float32", "float64", "float16", "int8", "int16", "int32", "int64"}),
        Cast=ALL, Clip=FLOATS | frozenset({"float64", "int8", "uint8", "int64", "uint64"}),
        Concat=ALL, Expand=ALL, Gather=ALL, Reshape=ALL, Transpose=ALL, Unsqueeze=ALL,
        Squeeze=ALL, Slice=ALL, Split=ALL, Identity=ALL,
        Where=frozenset({"uint8", "int32", "int64", "float32", "float64", "float16", "bool"}),
        Equal=CUDA_COMPARE | BOOL, Less=CUDA_COMPARE | BOOL, Greater=CUDA_COMPARE | BOOL,
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

# onnxruntime DmlExecutionProvider (DirectML, Windows): the same table's DML section, which
# registers BitShift and BitwiseAnd/Or/Xor/Not for the integer types.
DIRECTML = Profile(
    name="directml",
    runtime="onnxruntime DmlExecutionProvider",
    source="onnxruntime docs/OperatorKernels.md, DmlExecutionProvider section (onnxruntime "
           "1.32): BitShift uint8-uint64, Bitwise* all integers, opsets up to 27 (our 25)",
    opsets=(7, 25),
    ops=_ops(
        Abs=NUMERIC, Add=NUMERIC, Sub=NUMERIC, Mul=NUMERIC, Div=NUMERIC, Mod=NUMERIC,
        Neg=FLOATS | SIGNED, BitShift=UNSIGNED, BitwiseAnd=INTS, BitwiseOr=INTS,
        BitwiseXor=INTS, BitwiseNot=INTS, Cast=ALL, Clip=NUMERIC, Concat=ALL, Expand=ALL,
        Gather=ALL, Reshape=ALL, Transpose=ALL, Unsqueeze=ALL, Squeeze=ALL, Slice=ALL,
        Split=ALL, Identity=ALL, Where=ALL, Equal=ALL, Less=NUMERIC | BOOL,
        Greater=NUMERIC | BOOL, Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS,
        MatMul=FLOATS, MatMulInteger=frozenset({"uint8", "int8", "int32"}),
        DequantizeLinear=frozenset({"int8", "uint8", "int32"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
    ),
)

# TensorRT 10.x through onnx-tensorrt: docs/operators.md ("TensorRT 10.0 supports operators in
# the inclusive range of opset 9 to opset 20"; types FP32, FP16, BF16, INT32, INT64, INT8, UINT8
# (network I/O only), BOOL). No BitShift, no Bitwise*, no MatMulInteger; DequantizeLinear takes
# INT8 only; uint64 is not a TensorRT type (uint64 initializers are rejected).
TRT_ARITH = FLOATS | I32 | I64
TENSORRT = Profile(
    name="tensorrt",
    runtime="TensorRT 10.x (onnx-tensorrt parser; also onnxruntime's TensorRT provider)",
    source="onnx-tensorrt docs/operators.md for TensorRT 10.0 "
           "(https://github.com/onnx/onnx-tensorrt/blob/main/docs/operators.md)",
    opsets=(9, 20),
    ops=_ops(
        Abs=TRT_ARITH, Add=TRT_ARITH, Sub=TRT_ARITH, Mul=TRT_ARITH, Div=TRT_ARITH,
        Mod=TRT_ARITH, Neg=TRT_ARITH, Cast=TRT_ARITH | BOOL | {"uint8", "int8"},
        Clip=FLOATS | {"int8", "int32", "int64"}, Concat=TRT_ARITH | BOOL | {"int8"},
        Expand=TRT_ARITH | BOOL, Gather=TRT_ARITH | BOOL | {"int8"},
        Reshape=TRT_ARITH | BOOL | {"int8"}, Transpose=TRT_ARITH | BOOL | {"int8"},
        Unsqueeze=TRT_ARITH | BOOL | {"int8"}, Squeeze=TRT_ARITH | BOOL | {"int8"},
        Slice=TRT_ARITH | BOOL | {"int8"}, Split=TRT_ARITH | BOOL, Identity=TRT_ARITH | BOOL,
        Where=TRT_ARITH | BOOL, Equal=TRT_ARITH | BOOL, Less=TRT_ARITH | BOOL,
        Greater=TRT_ARITH | BOOL, Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS,
        MatMul=FLOATS, DequantizeLinear=frozenset({"int8"}) | FLOATS,
        QuantizeLinear=frozenset({"int8"}) | FLOATS,
    ),
    rules=("no-uint64-initializers",),
    notes=("uint8 only as a network input or output tensor type",),
)

# OpenVINO 2026.4 CPU plugin through its ONNX frontend. The frontend lists every op edgepe
# writes, BitShift and Bitwise* included; what the CPU plugin computes exactly was measured here
# (tests/test_openvino.py): int64 and uint64 arithmetic runs in 32 bits (positions past 2^31
# wrong: int64 BitShift/BitwiseAnd/Mod/Div), int32 Mod/Div lose exactness past 2^24 (as if
# computed in float32), and a float Div by a constant becomes a Mul by its reciprocal (1 ulp
# off the reference: integer-multiscale 0.0039 at |pos| ~ 1.6e7). So those are not listed;
# ops that compare, select or move int64 values are: the table graphs' int64 clamps pass the
# verifier's probe at int64's extremes on it.
OV_DATA = NUMERIC | BOOL
OPENVINO = Profile(
    name="openvino",
    runtime="OpenVINO 2026.4 CPU plugin (ONNX frontend)",
    source="OpenVINO supported operations, ONNX frontend (docs.openvino.ai 2025, "
           "about-openvino/compatibility-and-support/supported-operations); int64/int32/Div "
           "limits measured here with openvino 2026.4.1 (tests/test_openvino.py)",
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

# Qualcomm QNN (HTP/NPU) through onnxruntime's QNN provider: its supported-ops table. No
# BitShift or Bitwise* (logical And/Or/Not only); int32 Gather indices, >= 0; static shapes.
QNN_DATA = FLOATS | I32 | frozenset({"uint8", "int8", "bool"})
# The provider converts int64 graph inputs to int32 (its docs), so ops that only move or cast
# the positions' values take them; int64 arithmetic is not listed.
QNN_MOVE = QNN_DATA | I64
QNN = Profile(
    name="qnn",
    runtime="onnxruntime QNNExecutionProvider (Qualcomm AI Engine Direct, HTP)",
    source="onnxruntime docs, QNN Execution Provider, supported ONNX operators "
           "(onnxruntime 1.22 docs); Qualcomm AI Engine Direct 2.x 'Supported ONNX Ops'",
    opsets=(7, 21),
    ops=_ops(
        Abs=FLOATS | I32, Add=FLOATS | I32, Sub=FLOATS | I32, Mul=FLOATS | I32,
        Div=FLOATS | I32, Neg=FLOATS | I32, Cast=QNN_MOVE, Clip=FLOATS | I32,
        Concat=QNN_DATA, Expand=QNN_DATA, Gather=QNN_MOVE, Reshape=QNN_MOVE,
        Transpose=QNN_DATA, Unsqueeze=QNN_MOVE, Squeeze=QNN_MOVE, Slice=QNN_DATA,
        Split=QNN_DATA, Where=QNN_DATA, Equal=QNN_DATA, Less=QNN_DATA, Greater=QNN_DATA,
        Floor=FLOATS, Sin=FLOATS, Cos=FLOATS, Gemm=FLOATS, MatMul=FLOATS,
        DequantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
        QuantizeLinear=frozenset({"int8", "uint8"}) | FLOATS,
    ),
    index_dtypes=I32,
    rules=("nonnegative-gather-indices", "static-shapes"),
    notes=("int64 appears only as the graph input: the provider converts int64 inputs to "
           "int32 (positions beyond +-2^31 do not survive)",),
)

# Apple CoreML (ML Program) through onnxruntime's CoreML provider: its supported-ops table.
# No bitwise ops, no Mod, no Floor, no Sin/Cos, no Where/comparisons; no plain Gather (GatherND
# only); Slice with constant bounds. Nothing edgepe writes for positions runs on it whole.
COREML = Profile(
    name="coreml",
    runtime="onnxruntime CoreMLExecutionProvider (ML Program)",
    source="onnxruntime docs, CoreML Execution Provider, supported operators for ML Program "
           "(onnxruntime 1.22)",
    opsets=(7, 21),
    ops=_ops(
        Add=FLOATS | I32, Sub=FLOATS | I32, Mul=FLOATS | I32, Div=FLOATS, Round=FLOATS,
        Cast=FLOATS | I32 | I64 | BOOL, Clip=FLOATS, Concat=FLOATS | I32,
        Reshape=FLOATS | I32, Transpose=FLOATS | I32, Unsqueeze=FLOATS | I32 | I64,
        Squeeze=FLOATS | I32, Slice=FLOATS | I32, Split=FLOATS, Gemm=FLOATS, MatMul=FLOATS,
    ),
    index_dtypes=I32,
    notes=("int64 inputs are cast to int32 by the provider",),
)

# Android NNAPI through onnxruntime's NNAPI provider: its supported-ops table. Sin but no Cos,
# no Floor, no bitwise, int32 Gather indices.
NNAPI = Profile(
    name="nnapi",
    runtime="onnxruntime NnapiExecutionProvider (Android NNAPI)",
    source="onnxruntime docs, NNAPI Execution Provider, supported operators (onnxruntime 1.22)",
    opsets=(7, 21),
    ops=_ops(
        Abs=F32, Add=F32 | I32, Sub=F32 | I32, Mul=F32 | I32, Div=F32 | I32, Neg=F32,
        Cast=F32 | I32 | I64 | BOOL, Clip=F32, Concat=F32 | I32, Gather=F32 | I32 | I64,
        Reshape=F32 | I32, Transpose=F32, Unsqueeze=F32 | I32 | I64, Squeeze=F32 | I32,
        Slice=F32 | I32, Sin=F32, Floor=F32, Gemm=F32, MatMul=F32,
        DequantizeLinear=frozenset({"uint8"}) | F32, QuantizeLinear=frozenset({"uint8"}) | F32,
    ),
    index_dtypes=I32,
    rules=("static-shapes",),
    notes=("int64 inputs are cast to int32 by the provider",),
)

# XNNPACK through onnxruntime's XNNPACK provider: a float NN kernel library (Conv, pooling,
# Gemm/MatMul, Softmax, Resize, QLinear*): no integer or elementwise-position op of edgepe's.
XNNPACK = Profile(
    name="xnnpack",
    runtime="onnxruntime XnnpackExecutionProvider",
    source="onnxruntime docs, XNNPACK Execution Provider, supported ops (onnxruntime 1.22)",
    opsets=(7, 21),
    ops=_ops(Gemm=F32, MatMul=F32, Transpose=F32),
    notes=("every other node runs on onnxruntime's CPU provider instead",),
)

PROFILES: dict[str, Profile] = {
    p.name: p for p in (ORT_CPU, ORT_CUDA, DIRECTML, TENSORRT, OPENVINO, QNN, COREML, NNAPI,
                        XNNPACK)
}
DEFAULT_TARGET = "ort-cpu"
