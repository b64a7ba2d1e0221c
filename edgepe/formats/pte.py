"""ExecuTorch programs (``--format pte``): the reference module, exported to PyTorch's edge runtime.

A ``.pte`` is a program of Core ATen operators that ExecuTorch's runtime runs with its portable
kernels (Android, iOS, Linux, and Cortex-M through its Arm backends). ``prepare`` wraps what the
artifact computes in a small ``nn.Module`` holding only the state it uses, exports it with
``torch.export`` (positions ``[N]``, ``N`` dynamic up to ``max_n``), lowers it with
``executorch.exir.to_edge`` and serialises the program:

- ``--mode compute``: the scheme's own ``encode``, traced (bit schemes trace to
  ``bitwise_right_shift``/``bitwise_and``/``bitwise_xor`` and ``mm``: the integer front end of the
  ONNX graphs, in ATen);
- ``--mode table``: the table of ``edgepe.graphs.table_values`` as a constant, rows gathered at
  positions clamped to ``[0, max_len - 1]`` as every table artifact does (bias rows by the
  distance ``t - u`` clamped to the table, multi-index rows per coordinate);
- ``--quantize int8``: tables store int8 rows and one float32 scale a column (rows gathered, then
  ``q * scale``); the projection schemes (``binary``, ``fourier-binary``) multiply the int32 bits
  by int8 weights with int32 accumulation and rescale once, as the int8 C header does, with its
  quantisation and proven bound (``edgepe.graphs.int8.projection_quant``).

What tracing needs (issue 22): ``>>`` traces to ``aten.__rshift__``, outside Core ATen, so the
schemes shift with ``torch.bitwise_right_shift``, which ExecuTorch keeps through
``_core_aten_ops_exception_list`` and runs with its portable kernel; data-dependent position
checks skip while exporting (the runtimes check positions before a call); state ``encode`` does
not use (the demo's ``pe_binary`` table) is not lifted by strict export, so the program holds only
the weights.
Integer ``Div``/``Mod`` are avoided: ExecuTorch's ``remainder(-1, 2)`` is -1 where PyTorch's is 1;
float divisions divide tensors of one shape (``edgepe.schemes._base.divide``): ExecuTorch divides
by a broadcast divisor through its reciprocal, one ulp off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgepe.contract.config import ExportConfig, Prepared, base_manifest
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.graphs.table_values import BIAS_SATURATION

INSTALL = "pip install -c constraints.txt -e '.[executorch]'"
# Programs take positions [N] with N up to this (the runtime plans its memory for it); longer
# calls are split by ``edgepe.load``. Bias programs take [N] x [M] up to BIAS_MAX_N each.
MAX_N = 4096
BIAS_MAX_N = 512
# Operators outside Core ATen that the programs use, each with a portable kernel in ExecuTorch.
CORE_ATEN_EXCEPTIONS = ("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar")
PROJECTIONS = ("binary", "fourier-binary")


def require_executorch() -> str:
    """The installed ExecuTorch version, or a one-line ``BadParameterError`` with the install
    line. Its import logs warnings about torchao's optional CUDA kernels and a torch pytree
    deprecation, which say nothing about edgepe's programs: those two loggers are kept quiet."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import executorch.exir  # noqa: F401
        import executorch.runtime  # noqa: F401
    except ImportError:
        raise BadParameterError(
            f"--format pte needs ExecuTorch, which is not installed: {INSTALL}"
        ) from None
    from importlib.metadata import version

    return version("executorch")


def max_n(config: ExportConfig) -> int:
    """The most positions (and key positions) one call of the program takes."""
    limit = BIAS_MAX_N if config.scheme.spec.kind == "bias" else MAX_N
    return max(2, min(limit, config.scheme.max_len))


def check_options(config: ExportConfig) -> None:
    """Refuse the options a program cannot take, naming what works instead."""
    s = config.scheme
    if config.lowering != "bitwise":
        raise BadParameterError(
            f"--lowering {config.lowering} is for ONNX graphs; a pte program shifts and masks "
            "with ExecuTorch's portable bitwise kernels"
        )
    if config.int8_runtime != "fold":
        raise BadParameterError(
            f"--int8-runtime {config.int8_runtime} chooses how an ONNX graph holds int8; a pte "
            "program keeps its int8 tensors int8 and dequantises per call"
        )
    if config.dtype == "bit":
        raise BadParameterError("--dtype bit packs table files: use --format npy, bin or c")
    if config.dtype == "uint8" and not _bit_output(s):
        raise BadParameterError(
            f"--dtype uint8 needs outputs that are exactly 0 or 1; scheme '{s.scheme}' has "
            "other values"
        )
    if config.extra:
        options = ", ".join(f"{k}={v}" for k, v in config.extra.items())
        raise BadParameterError(f"{options} applies to ONNX graphs, not to --format pte")
    if config.mode == "sliced":
        raise BadParameterError("--mode sliced is an ONNX graph or a C header (--format onnx or "
                                "c); an ExecuTorch program is --mode compute or table")
    if config.quantize == "int8":
        from edgepe.graphs.quant import check_quantizable

        check_quantizable(config)
        if config.mode == "compute" and s.scheme not in PROJECTIONS:
            raise BadParameterError(
                f"scheme '{s.scheme}' stores no weights to quantise in a compute program; for a "
                "small int8 program use --mode table --quantize int8 (int8 compute programs: "
                f"{', '.join(PROJECTIONS)})"
            )
    if config.mode == "table":
        from edgepe.formats.bin import check_table_size

        check_table_size(config, "int8" if config.quantize == "int8" else config.dtype)


def _bit_output(scheme) -> bool:
    from edgepe.graphs._common import BIT_OUTPUT_SCHEMES

    return scheme.scheme in BIT_OUTPUT_SCHEMES


def output_shape(config: ExportConfig) -> list[Any]:
    s = config.scheme
    return [s.heads, "N", "M"] if s.spec.kind == "bias" else ["N", s.d_model]


def prepare(config: ExportConfig, module) -> Prepared:
    """The ``.pte`` artifact for ``config``: manifest (all but sha256) and a writer of its bytes."""
    et_version = require_executorch()
    check_options(config)
    manifest = base_manifest(config, output_shape(config), config.dtype)
    manifest["lowering"] = None  # --lowering chooses ONNX ops; a program has ATen operators
    program_module = _program_module(config, module, manifest)
    data, operators = _lower(config, program_module)
    manifest["pte"] = {
        "executorch": et_version,
        "max_n": max_n(config),
        "method": "forward",
        "inputs": ["positions", "key_positions"] if config.scheme.spec.kind == "bias"
        else ["positions"],
        "operators": operators,
    }

    def write(f) -> None:
        f.write(data)

    return Prepared(manifest, write)


def _program_module(config: ExportConfig, module, manifest: dict[str, Any]):
    """The ``nn.Module`` whose ``forward`` the program runs (and the manifest's ``quant``)."""
    s = config.scheme
    out_dtype = {"float32": torch.float32, "float16": torch.float16, "uint8": torch.uint8}[
        config.dtype]
    if config.mode == "compute":
        if config.quantize == "int8":
            return _Int8Projection(*_projection_quant(config, module, manifest))
        return (_Bias if s.spec.kind == "bias" else _Encode)(module, out_dtype)
    from edgepe.graphs.table_values import full_table, table_shape

    if config.quantize == "int8":
        from edgepe.graphs.quant import table_quant
        from edgepe.graphs.table_values import iter_table

        tq = table_quant(config, module)
        manifest["quant"] = tq.manifest("table_int8")
        table = np.concatenate(list(tq.chunks(iter_table(s, module))))
        scale = tq.scale.astype(np.float32)
    else:
        table, scale = full_table(s, module), None
    assert table.shape == table_shape(s)
    return _Table(s, table, scale, out_dtype)


def _projection_quant(config: ExportConfig, module, manifest: dict[str, Any]):
    """``(shifts, q int8 [n, d], scale float32 [d] or [1])`` of the int8 projection, with the
    quantisation, measured error and proven bound of ``edgepe.graphs.quant`` for an exact int32 sum
    and one rescale (the C header's form: ``projection_quant(..., "int32")``) in the manifest."""
    from edgepe.graphs.int8 import projection_quant

    q, scale, _, quant = projection_quant(config, module, "int32")
    for graph_only in ("tensor", "scale_tensor", "scale_storage"):
        quant.pop(graph_only, None)
    quant["bytes"]["int8"] = q.size + 4 * scale.size  # the program keeps float32 scales
    manifest["quant"] = quant
    # Row-major copies: a transposed view would trace with a dim order ExecuTorch cannot map.
    return (np.arange(config.scheme.n_bits, dtype=np.int64),
            np.ascontiguousarray(q, dtype=np.int8),
            np.ascontiguousarray(scale, dtype=np.float32).reshape(-1))


def _lower(config: ExportConfig, program_module) -> tuple[bytes, list[str]]:
    """``torch.export`` -> ``to_edge`` -> ``to_executorch``: the program's bytes and the
    operators it calls (``aten::name.overload``, sorted)."""
    from torch.export import Dim, export

    bias = config.scheme.spec.kind == "bias"
    arity = config.scheme.arity
    limit = max_n(config)
    # An example of 2 positions and a dynamic N: torch.export specialises dimensions of size 0
    # and 1, so the example is never one of those.
    example = torch.zeros((2,) if arity is None else (2, arity), dtype=torch.int64)
    args: tuple = (example, torch.zeros(2, dtype=torch.int64)) if bias else (example,)
    dynamic = {"positions": {0: Dim("N", min=1, max=limit)}}
    if bias:
        dynamic["key_positions"] = {0: Dim("M", min=1, max=limit)}

    import warnings

    # torch.export's pytree warns (FutureWarning) about its own LeafSpec use: not the user's.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # Strict export lifts only the state the graph reads: the demo's unused pe_binary table
        # (20 KB at L = 512) is not in the program.
        exported = export(program_module.eval(), args, dynamic_shapes=dynamic, strict=True)
        return _to_executorch(exported)


def _to_executorch(exported) -> tuple[bytes, list[str]]:
    from executorch.exir import EdgeCompileConfig, to_edge

    exceptions = [getattr(torch.ops.aten.bitwise_right_shift, name.split(".")[1])
                  for name in CORE_ATEN_EXCEPTIONS]
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    edge = to_edge(exported, compile_config=EdgeCompileConfig(
        _core_aten_ops_exception_list=exceptions))
    # Fold what depends on constants only (the bit shifts, their masks, the transposed weight)
    # into the program's constants: fewer operators, a smaller program. Casts are not folded:
    # int8 weights widened to int32 would be stored as int32 (4x the bytes).
    casts = {exir_ops.edge.dim_order_ops._to_dim_order_copy.default,
             exir_ops.edge.aten._to_copy.default}
    edge._edge_programs["forward"] = constant_prop_pass(edge.exported_program(),
                                                        custom_skip_targets=casts)
    program = edge.to_executorch()
    data = bytes(program.buffer)
    operators = sorted({f"{op.name}.{op.overload}" if op.overload else op.name
                        for plan in program.executorch_program.execution_plan
                        for op in plan.operators})
    return data, operators


# The methods torch.export traces carry "pragma: no mutate block": mutmut's trampoline, which
# picks the mutant at call time, is Python that dynamo cannot trace (scripts/mutation.py).
# tests/test_mut_pte.py runs each of them against NumPy instead.
class _Encode(torch.nn.Module):
    """``positions [N] (or [N, k]) -> encode(positions)`` in the output dtype."""

    def __init__(self, scheme_module, dtype) -> None:
        super().__init__()
        self.scheme = scheme_module
        self.dtype = dtype

    def forward(self, positions):  # pragma: no mutate block (traced)
        return self.scheme.encode(positions).to(self.dtype)


class _Bias(_Encode):
    """``positions [N], key_positions [M] -> bias [H, N, M]``."""

    def forward(self, positions, key_positions):  # pragma: no mutate block (traced)
        return self.scheme.encode(positions, key_positions).to(self.dtype)


class _Int8Projection(torch.nn.Module):
    """``positions [N] -> float32(bits @ q) * scale``: int32 bits of ``pos mod 2^n`` (two's
    complement, as ``edgepe.schemes.bits``), int8 weights widened to int32, int32 accumulation
    (exact: ``|acc| <= 127 n``), one float32 rescale."""

    def __init__(self, shifts, q, scale) -> None:
        super().__init__()
        self.register_buffer("shifts", torch.from_numpy(shifts))
        self.register_buffer("weight_int8", torch.from_numpy(q))
        self.register_buffer("weight_scale", torch.from_numpy(scale))

    def forward(self, positions):  # pragma: no mutate block (traced)
        shifted = torch.bitwise_right_shift(positions.unsqueeze(-1), self.shifts)
        bits = torch.bitwise_and(shifted, 1).to(torch.int32)
        acc = torch.mm(bits, self.weight_int8.to(torch.int32))
        return acc.to(torch.float32) * self.weight_scale


class _Table(torch.nn.Module):
    """Rows of a stored table at positions clamped to ``[0, max_len - 1]`` (the layout of
    ``edgepe.graphs.table_values``), dequantised (``q * scale``) when it is int8."""

    def __init__(self, s, table: np.ndarray, scale: np.ndarray | None, dtype) -> None:
        super().__init__()
        self.kind = "bias" if s.spec.kind == "bias" else "multi" if s.arity else "pe"
        self.hi = s.max_len - 1
        if scale is None:
            table = table.astype(_NUMPY[dtype])
        self.register_buffer("table", torch.from_numpy(np.ascontiguousarray(table)))
        self.register_buffer("scale", None if scale is None else torch.from_numpy(scale))
        if self.kind == "multi":  # exact schemes: never int8
            from edgepe.formats.bin import index_columns

            width = table.shape[1]
            manifest = {"d_model": s.d_model, "scheme": s.scheme,
                        "params": s.as_dict()["params"], "positions": {"arity": s.arity}}
            axis, bit, valid = index_columns(manifest, width)
            # Column j is bit bit[j] of coordinate axis[j]: entry axis_row * W + bit[j] of the
            # flattened [L * W] table.
            self.register_buffer("axis", torch.from_numpy(axis.astype(np.int64)))
            self.register_buffer("bit", torch.from_numpy(bit.astype(np.int64)))
            self.register_buffer("width", torch.tensor(width, dtype=torch.int64))
            self.register_buffer("valid", torch.from_numpy(np.asarray(valid)).to(self.table.dtype))

    def _rows(self, index):  # pragma: no mutate block (traced)
        rows = self.table[index]
        return rows if self.scale is None else rows.to(torch.float32) * self.scale

    def forward(self, positions, key_positions=None):  # pragma: no mutate block (traced)
        if self.kind == "bias":
            # Rows by distance, as every bias table (table_values.bias_rows): positions
            # saturated at +-2^61 (t - u cannot overflow), the distance clamped to the table.
            t = positions.clamp(-BIAS_SATURATION, BIAS_SATURATION).unsqueeze(1)
            u = key_positions.clamp(-BIAS_SATURATION, BIAS_SATURATION).unsqueeze(0)
            rows = (t - u).clamp(-self.hi, self.hi) + self.hi  # [N, M]
            return self._rows(rows).permute(2, 0, 1)  # [H, N, M]
        positions = positions.clamp(0, self.hi)
        if self.kind == "pe":
            return self._rows(positions)
        flat = positions[:, self.axis] * self.width + self.bit  # [N, d]
        return self.table.reshape(-1)[flat] * self.valid


_NUMPY = {torch.float32: np.float32, torch.float16: np.float16, torch.uint8: np.uint8}


class Program:
    """A ``.pte`` loaded in ExecuTorch's runtime (``executorch.runtime``), for ``edgepe.load`` and
    the verifier: ``run(feeds)`` takes int64 ``positions`` (and ``key_positions``) of any length
    and calls the program on pieces of at most ``pte.max_n`` (bias: blocks of queries x keys).

    ``data`` is the file's bytes as hashed by the caller (never re-read from a path). The
    runtime checks the flatbuffer's internal consistency before it plans anything; a program
    holds operator names and constants only, so loading one runs no code from the file.
    """

    name = "executorch"
    placement = None

    def __init__(self, data: bytes, manifest: dict[str, Any]) -> None:
        require_executorch()
        from executorch.runtime import Runtime, Verification

        section = manifest.get("pte") if isinstance(manifest.get("pte"), dict) else {}
        limit = section.get("max_n")
        if not (isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit <= MAX_N):
            raise BadParameterError(f"the manifest's pte.max_n must be 1 to {MAX_N}, got {limit!r}")
        self.max_n = limit
        self.bias = manifest.get("kind") == "bias"
        self.width = manifest["heads"] if self.bias else manifest["d_model"]
        self.dtype = np.dtype(manifest["dtype"])
        try:
            # The method points into the program: both are kept for the object's lifetime.
            self._program = Runtime.get().load_program(
                data, verification=Verification.InternalConsistency)
            self._method = self._program.load_method("forward")
        except Exception as exc:  # noqa: BLE001 - the runtime raises untyped errors

            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ArtifactError(f"the .pte does not load in ExecuTorch: {first}") from None

    _started = False  # ExecuTorch's thread pool starts on the first call of the process

    def _call(self, *inputs: np.ndarray) -> np.ndarray:
        tensors = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        if Program._started:
            return self._method.execute(tensors)[0].numpy()
        # Starting the thread pool, ExecuTorch's native code logs its probing of
        # /sys/devices/... for an Arm CPU id to file descriptor 2 (five lines that say nothing
        # about the program): that one call runs with fd 2 on /dev/null. Errors still raise.
        import os

        saved = os.dup(2)
        try:
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 2)
            out = self._method.execute(tensors)[0].numpy()
            Program._started = True
            return out
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        positions = np.asarray(feeds["positions"], dtype=np.int64)
        keys = np.asarray(feeds.get("key_positions", np.zeros(0, np.int64)), dtype=np.int64)
        step = self.max_n
        if not len(positions) or (self.bias and not len(keys)):  # a program takes N >= 1
            shape = (self.width, len(positions), len(keys)) if self.bias else (0, self.width)
            return np.zeros(shape, dtype=self.dtype)
        if not self.bias:
            return np.concatenate([self._call(positions[i:i + step])
                                   for i in range(0, len(positions), step)])
        return np.concatenate([
            np.concatenate([self._call(positions[i:i + step], keys[j:j + step])
                            for j in range(0, len(keys), step)], axis=2)
            for i in range(0, len(positions), step)], axis=1)

    def close(self) -> None:
        self._method = self._program = None


def describe_program(data: bytes) -> dict[str, Any]:
    """What ``edgepe inspect`` shows of a ``.pte``, read from the program itself (not from its
    manifest): each method's operators with the kernel library that provides them (ExecuTorch's
    portable kernels, the set its selective build takes from ``kernels/portable/*.yaml``) and
    whether this runtime registers them, its instruction count, and its constant bytes."""
    require_executorch()
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.extension.pybindings.portable_lib import _get_operator_names

    try:
        program = deserialize_pte_binary(data).program
    except Exception as exc:  # noqa: BLE001 - any parse failure: not a program

        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"not an ExecuTorch program edgepe can read ({first})") from None
    # A flatbuffer that parses can still lack the tables a program needs (a zeroed body).
    if not program.execution_plan:
        raise ArtifactError("not an ExecuTorch program edgepe can read (no execution plan)")
    portable = _portable_operators()
    registered = set(_get_operator_names())
    methods = []
    for plan in program.execution_plan:
        operators = [f"{op.name}.{op.overload}" if op.overload else op.name
                     for op in plan.operators]
        methods.append({
            "name": plan.name,
            "instructions": sum(len(chain.instructions) for chain in plan.chains),
            "operators": [(op, op in portable, op in registered) for op in operators],
        })
    return {"methods": methods,
            "constant_bytes": sum(len(b.storage) for b in program.constant_buffer or ())}


def _portable_operators() -> set[str]:
    """``namespace::name.overload`` of every operator with a portable kernel (the yaml files
    ExecuTorch ships: ``functions.yaml`` holds aten ops, ``custom_ops.yaml`` its own)."""
    import re
    from pathlib import Path

    import executorch.kernels.portable as kernels

    found = set()
    for path in sorted(Path(kernels.__file__).parent.glob("*.yaml")):
        for line in path.read_text().splitlines():
            if match := re.match(r"^- (?:op|func): ([\w:]+)\.(\w+)", line):
                name, overload = match.groups()
                found.add(f"{name if '::' in name else 'aten::' + name}.{overload}")
    return found


def check_file(path: Path, manifest: dict[str, Any]) -> tuple[tuple[str, ...], set[str]]:
    """Refuse a file with no ExecuTorch flatbuffer identifier; returns the program's inputs."""
    # An ExecuTorch program is a flatbuffer whose file identifier (bytes 4..8) is "ET" and a
    # two-digit schema version; ExecuTorch's loader then checks its internal consistency.
    with path.open("rb") as f:
        head = f.read(8)
    if len(head) < 8 or head[4:6] != b"ET" or not head[6:8].isdigit():
        raise ArtifactError(f"{str(path)!r} is not an ExecuTorch program (no ET flatbuffer "
                            "identifier: truncated or another file?)")
    return (("positions", "key_positions") if manifest.get("kind") == "bias"
            else ("positions",)), set()
