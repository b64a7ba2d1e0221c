"""Export a patched model with a user's exporter, proven on that exporter's runtime (issue 42).

``export(report, out, exporter)``: the patched model (``report.model``) and, with the original
modules put back for the time it takes, the unpatched one are each exported by the same exporter
as ``input_ids [1, S], position_ids [1, S] (int64) -> logits [1, S, vocab]`` (an
encoder-decoder, T5: ``input_ids [1, S], decoder_input_ids [1, S]``; no cache:
``use_cache=False``; static shapes, ``S = SEQ``), both programs run on the exporter's runtime on
the same inputs (positions from 0, from ``L - S``, and a scattered set below ``L``), and the
largest logits difference must be within ``TOLERANCE``. The exported graph must hold no Sin,
Cos or Log (T5's buckets; checked on torch.export's ATen graph for every exporter, and on the
program: ONNX node types, ExecuTorch operator names, LiteRT op codes; a delegate such as
XNNPACK hides its ops from the program's operator list, so the ATen count is the one that holds
there); the
unpatched program's count is recorded beside (a check that can fail: not 0 for a rotary
model).

Exporters, each with the runtime it is proven on:

- ``onnx``: ``torch.onnx.export(..., dynamo=True)``, one file (no external data), onnxruntime
  CPU.
- ``pte``: ``torch.export`` -> ``executorch.exir.to_edge`` -> ``to_executorch`` with ExecuTorch's
  portable kernels; ``pte-xnnpack``: ``to_edge_transform_and_lower`` with the XNNPACK
  partitioner (executorch 1.5.1 ships it). Both run on ``executorch.runtime``.
- ``tflite``: ``litert_torch.convert`` (litert-torch 0.10, the ``[litert]`` extra), run on
  ``ai_edge_litert``'s interpreter with its built-in kernels.

The lowering: the sliced module slices positions with integer floor division and remainder on
non-negative (clamped) positions, never shifts, which every exporter here takes (litert-torch
has no ``aten.bitwise_right_shift``; ExecuTorch's ``remainder`` differs from PyTorch's only for
negative operands); the table module is a gather. ``LOWERING`` says it per exporter.

The manifest beside the program (``PROGRAM.json``) records what was proven and against what: the
modules replaced (one line each), the exporter and its version, the runtime, the inputs, the
measured difference and its tolerance, the Sin/Cos count of both programs and the program's
sha256. ``check_program`` re-reads such a pair as untrusted input (``edgepe.patch``'s module doc
of ``verify``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from edgepe.contract.commit import target_lock, write_pair
from edgepe.contract.config import check_output, sha256_bytes
from edgepe.contract.errors import BadParameterError, ParityError
from edgepe.contract.version import __version__

EXPORTERS = ("onnx", "pte", "pte-xnnpack", "tflite")
SUFFIX = {"onnx": ".onnx", "pte": ".pte", "pte-xnnpack": ".pte", "tflite": ".tflite"}
RUNTIME = {"onnx": "onnxruntime CPU", "pte": "executorch.runtime (portable kernels)",
           "pte-xnnpack": "executorch.runtime (XNNPACK delegate)",
           "tflite": "ai_edge_litert's interpreter (built-in kernels, no delegate)"}
LOWERING = {e: "gather (table) / floor division and remainder (sliced): no shift, no trig"
            for e in EXPORTERS}
# litert-torch 0.10 has no lowering for aten.bitwise_right_shift (issue 42): the sliced module's
# floor division and remainder become DIV/FLOOR_MOD (with SIGN); its 64-bit inputs are int32
# in the .tflite (enable_x64=False), so positions and ids are fed as int32.
LOWERING["tflite"] += "; int32 inputs (litert-torch downcasts 64-bit I/O)"
SEQ = 8
# Both programs hold the same graph but for the PE: with a table patch the cos/sin are the same
# float32 values, so the logits match exactly unless the runtime schedules the two graphs'
# float ops differently (a fused kernel on one side): 1e-5 covers float32 reassociation over the
# test models' 2 layers (logits ~1; measured 0 on onnxruntime and ExecuTorch portable).
TOLERANCE = 1e-5
TRIG = ("sin", "cos", "log")  # log: T5's buckets (issue 42)


class Logits(torch.nn.Module):
    """``(input_ids, position_ids) -> logits``: the causal LM without its cache."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, position_ids):
        return self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits


class Seq2SeqLogits(torch.nn.Module):
    """``(input_ids, decoder_input_ids) -> logits``: an encoder-decoder (T5) without its cache."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, decoder_input_ids):
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids,
                          use_cache=False).logits


def _seq2seq(model) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def _wrap(model) -> torch.nn.Module:
    return (Seq2SeqLogits if _seq2seq(model) else Logits)(model).eval()


def inputs(model, max_len: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The proof's ``(input_ids, position_ids)`` pairs, each ``[1, SEQ]`` int64 (an
    encoder-decoder's: ``(input_ids, decoder_input_ids)``, three random pairs)."""
    g = torch.Generator().manual_seed(seed)
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(text.vocab_size)
    seq = min(SEQ, max_len)
    if _seq2seq(model):
        return [(torch.randint(0, vocab, (1, seq), generator=g),
                 torch.randint(0, vocab, (1, seq), generator=g)) for _ in range(3)]
    starts = [torch.arange(seq), torch.arange(max_len - seq, max_len),
              torch.sort(torch.randperm(max_len, generator=g)[:seq]).values]
    return [(torch.randint(0, vocab, (1, seq), generator=g), p[None, :]) for p in starts]


def _trig_in_graph(exported) -> int:
    return sum(1 for n in exported.graph.nodes if n.op == "call_function"
               and getattr(n.target, "__name__", "").split(".")[0] in TRIG)


def _torch_export(model, example):
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' and torch.export's deprecations
        return torch.export.export(_wrap(model), example, strict=False)


def _onnx(model, example):
    import warnings

    import onnx
    import onnxruntime as ort

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_wrap(model), example, dynamo=True, verbose=False)
    aten = _trig_in_graph(program.exported_program)
    proto = program.model_proto
    data = proto.SerializeToString()
    nodes = list(proto.graph.node) + [n for f in proto.functions for n in f.node]
    trig = sum(1 for n in nodes if n.op_type.lower() in TRIG)
    onnx.checker.check_model(proto)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(ids, pos):
        return session.run(None, dict(zip(names, [ids.numpy(), pos.numpy()], strict=True)))[0]

    return data, (aten, trig), run


def _pte(model, example, xnnpack: bool):
    from executorch.exir import to_edge, to_edge_transform_and_lower
    from executorch.runtime import Runtime

    exported = _torch_export(model, example)
    aten = _trig_in_graph(exported)  # a delegate (XNNPACK) hides its ops from the program
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(exported)
    program = edge.to_executorch()
    data = bytes(program.buffer)
    operators = {op.name for plan in program.executorch_program.execution_plan
                 for op in plan.operators}
    trig = sum(1 for op in operators if op.split("::")[-1].split(".")[0] in TRIG)
    loaded = Runtime.get().load_program(data)  # reads ``data`` in place: it must outlive run
    method = loaded.load_method("forward")

    def run(ids, pos, _keep=(data, loaded)):
        return method.execute([ids, pos])[0].numpy()

    return data, (aten, trig), run


def _tflite(model, example):
    import contextlib
    import io
    import tempfile

    import litert_torch
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    aten = _trig_in_graph(_torch_export(model, example))
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        edge = litert_torch.convert(_wrap(model), example)  # prints its progress
        path = Path(tmp) / "model.tflite"
        edge.export(str(path))
        data = path.read_bytes()
    # Without the default XNNPACK delegate: every op is listed (a delegate hides its ops) and
    # runs on LiteRT's built-in kernels.
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interpreter.allocate_tensors()
    ops = {d["op_name"] for d in interpreter._get_ops_details()}
    trig = sum(1 for op in ops if op.lower() in TRIG)
    runner = interpreter.get_signature_runner()
    names = sorted(interpreter.get_signature_list()["serving_default"]["inputs"])

    def run(ids, pos):
        feeds = dict(zip(names, [ids.numpy().astype("int32"), pos.numpy().astype("int32")],
                         strict=True))
        return next(iter(runner(**feeds).values()))

    return data, (aten, trig), run


def program(model, exporter: str, example):
    """``(bytes, (sin/cos in torch.export's ATen graph, in the program), run(ids, pos) ->
    logits numpy)``."""
    if exporter == "onnx":
        return _onnx(model, example)
    if exporter == "tflite":
        return _tflite(model, example)
    return _pte(model, example, xnnpack=exporter == "pte-xnnpack")


def export(report, out: str | Path, exporter: str = "onnx", force: bool = False,
           source: dict | None = None) -> dict:
    """Export ``report.model`` (patched by ``edgepe.patch``) with ``exporter`` to ``out`` and its
    manifest to ``out + '.json'``, proven against the unpatched model on the same runtime (module
    docstring); ``source``: the sha256 of the model folder's files (``edgepe.patch.verify``),
    ``{}`` for a model built in Python (such a program cannot be rebuilt). Returns the
    manifest; raises ``ParityError`` (nothing written) when the logits
    differ past ``TOLERANCE`` or Sin/Cos remain, ``BadParameterError`` for a bad option."""
    if exporter not in EXPORTERS:
        raise BadParameterError(f"exporter must be one of {', '.join(EXPORTERS)}, got "
                                f"{exporter!r}")
    out = Path(out)
    if out.suffix != SUFFIX[exporter]:
        raise BadParameterError(f"--out {str(out)!r}: the {exporter} exporter writes a "
                                f"{SUFFIX[exporter]} file")
    if not report.replaced:
        raise BadParameterError("nothing was patched (no rotary module): export the model "
                                "with its own exporter, its PE is already trig-free")
    manifest_path = Path(str(out) + ".json")
    check_output(out, [], force)
    check_output(manifest_path, [], force)
    model = report.model
    cases = inputs(model, report.max_len)
    example = cases[0]
    data, trig, run = program(model, exporter, example)
    report.swap(original=True)
    try:
        base_data, base_trig, base_run = program(model, exporter, example)
    finally:
        report.swap(original=False)
    worst = 0.0
    for ids, pos in cases:
        a, b = run(ids, pos), base_run(ids, pos)
        worst = max(worst, math.inf if a.shape != b.shape else float(abs(a - b).max()))
    if any(trig):
        raise ParityError(f"the patched {exporter} program still holds Sin/Cos/Log operators "
                          f"({trig[0]} in its ATen graph, {trig[1]} in the program)")
    if not worst <= TOLERANCE:
        raise ParityError(f"the patched {exporter} program's logits are {worst:.3g} off the "
                          f"unpatched program's on {RUNTIME[exporter]} (tolerance {TOLERANCE})")
    manifest = {
        "kind": "patched-model",
        "edgepe": __version__,
        "model": type(model).__name__,
        "source": dict(source or {}),
        "exporter": exporter,
        "exporter_version": _version(exporter),
        "runtime": RUNTIME[exporter],
        "lowering": LOWERING[exporter],
        "mode": report.mode,
        "max_len": report.max_len,
        "modules": [str(m) for m in report.modules],
        "inputs": {"input_ids": [1, len(example[1][0])], "decoder_input_ids": [
            1, len(example[1][0])]} if _seq2seq(model) else {
            "input_ids": [1, len(example[1][0])], "position_ids": [
                [int(p[0, 0]), int(p[0, -1])] for _, p in cases]},
        "parity": {"compared_with": f"the unpatched model exported by {exporter} and run on "
                   f"{RUNTIME[exporter]}, same inputs", "max_abs_err": worst,
                   "tolerance": TOLERANCE, "passed": True},
        # sin/cos/log: (in torch.export's ATen graph, in the program's own operators)
        "trig_ops": {"patched": list(trig), "unpatched": list(base_trig)},
        "bytes": {"patched": len(data), "unpatched": len(base_data)},
    }

    def manifest_bytes(sha: str) -> bytes:
        manifest["sha256"] = sha
        return (json.dumps(manifest, indent=2) + "\n").encode()

    with target_lock(out):
        write_pair(out, lambda f: (f.write(data), sha256_bytes(data))[1], manifest_bytes)
    return manifest


def _version(exporter: str) -> str:
    from importlib.metadata import version

    package = {"onnx": "torch", "tflite": "litert-torch"}.get(exporter, "executorch")
    return version(package)
