"""A tiny transformer layer with edgepe's binary PE, from PyTorch to one integer-PE ONNX graph.

    .venv/bin/python scripts/example_transformer.py [--out DIR] [--offset K]

1. PyTorch: ``TinyTransformer`` adds edgepe's ``binary`` reference PE (the demo's module,
   seeded) to token features and runs one ``nn.TransformerEncoderLayer`` (seeded) over them:
   ``y = layer(x + PE(positions))``.
2. ONNX, in two parts joined into one graph:
   - the PE is edgepe's compute graph (``edgepe.export``): ``positions`` int64 -> BitwiseAnd with
     the masks 2^k, one Cast to float, Gemm by the projection (pre-scaled by 2^-k); no table, no
     trig;
   - the layer is exported by ``torch.onnx.export`` as ``(x, pe) -> y``;
   - ``edgepe.graft`` puts the first in place of the second's ``pe`` input (a new ``positions``
     input): the result takes ``x [B, S, D]`` and ``positions [S]`` and returns ``y``.
3. onnxruntime runs the merged graph; ``y`` matches PyTorch within ``ATOL`` (float32 attention
   and layer norm in a different kernel order: measured 6e-7 to 7e-7 on these sizes).

Positions are explicit inputs, so streaming decode is ``positions = offset + arange(S)`` and
positions past ``max_len`` wrap (the binary scheme's documented policy) in both models alike.
``scripts/`` is never imported by the package; ``tests/test_example.py`` runs ``main``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

MAX_LEN, D_MODEL, HEADS, FFN, SEED = 512, 32, 4, 64, 0
ATOL = 1e-5
INTEGER_OPS = {"Unsqueeze", "Cast", "BitShift", "BitwiseAnd", "BitwiseXor", "BitwiseOr",
               "Reshape", "Squeeze"}


def models(seed: int = SEED):
    """``(pe_config, TinyTransformer)``: the PyTorch model, in eval mode."""
    import torch
    from torch import nn

    from edgepe.schemes import build, resolve

    class Block(nn.Module):
        """``y = layer(x + pe)``: the part torch.onnx exports (the PE comes in as an input)."""

        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0,
                                                    batch_first=True)

        def forward(self, x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
            return self.layer(x + pe)

    class TinyTransformer(nn.Module):
        def __init__(self, config) -> None:
            super().__init__()
            self.pe = build(config, seed=seed)  # the same seed edgepe.export uses below
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + 1)
                self.block = Block()

        def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            return self.block(x, self.pe.encode(positions))

    config = resolve("binary", MAX_LEN, d_model=D_MODEL)
    return config, TinyTransformer(config).eval()


def export_layer(model, out: Path) -> Path:
    """The encoder block as ONNX ``(x [B, S, D], pe [S, D]) -> y [B, S, D]`` (opset 18)."""
    import logging
    import warnings

    import torch

    # The exporter logs and warns about things this small block does not use (torchvision ops,
    # deprecations inside torch): keep the example's output to its own lines.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    batch, steps = torch.export.Dim("B", min=1, max=1024), torch.export.Dim("S", min=2, max=4096)
    example = (torch.zeros(2, 5, D_MODEL), torch.zeros(5, D_MODEL))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model.block, example, dynamo=True, opset_version=18, input_names=["x", "pe"],
            output_names=["y"], dynamic_shapes=({0: batch, 1: steps}, {0: steps}),
            verbose=False,
        )
    program.save(str(out))
    return out


def merge(pe_path: Path, layer_path: Path, out: Path):
    """One graph: edgepe's PE graph in place of the layer's ``pe`` input; inputs ``x`` and
    ``positions``. ``edgepe.graft`` reconciles the IR versions (edgepe pins the lowest for its
    opset, 8 for 18; the dynamo exporter writes 10), prefixes the PE's names and proves the
    merged graph equal to the layer fed the PE's own rows; returns its report."""
    import edgepe

    return edgepe.graft(layer_path, pe=pe_path, at="pe", positions="positions", out=out)


def integer_prefix(model) -> tuple[list[str], int]:
    """Ops from ``positions`` up to the first float tensors, and how many Casts make floats.

    Walks the graph forward from the ``positions`` input, stopping at each Cast to float32.
    """
    from onnx import TensorProto, helper

    reached, ops, casts = {"positions"}, [], 0
    for node in model.graph.node:  # nodes are stored in topological order (ONNX requires it)
        if not reached.intersection(node.input):
            continue
        ops.append(node.op_type)
        to = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Cast" and to == TensorProto.FLOAT:
            casts += 1
            continue
        reached.update(node.output)
    return ops, casts


def main(out_dir: str | Path, offset: int = 0, steps: int = 12, batch: int = 3) -> dict:
    """Build, export, merge and compare; returns the figures the script prints."""
    import onnxruntime as ort
    import torch

    from edgepe.export import ExportConfig, export

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config, model = models()
    pe_path = export(ExportConfig(scheme=config, seed=SEED, out=out_dir / "binary-pe.onnx"),
                     force=True).path
    layer_path = export_layer(model, out_dir / "layer.onnx")
    merged_path = out_dir / "tiny-transformer.onnx"
    grafted = merge(pe_path, layer_path, merged_path)

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((batch, steps, D_MODEL)).astype(np.float32)
    positions = np.arange(offset, offset + steps, dtype=np.int64)
    with torch.no_grad():
        want = model(torch.as_tensor(x), torch.as_tensor(positions)).numpy()
    session = ort.InferenceSession(str(merged_path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["y"], {"x": x, "positions": positions})

    import onnx

    ops, casts = integer_prefix(onnx.load(merged_path))
    return {
        "path": merged_path,
        "max_abs_err": float(np.abs(got - want).max()),
        "shape": got.shape,
        "pe_ops": ops,
        "float_casts": casts,
        "inputs": [i.name for i in session.get_inputs()],
        "graft": grafted,
    }


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="folder for the ONNX files (default: temp)")
    parser.add_argument("--offset", type=int, default=0, help="first position (streaming)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = main(args.out or tmp, offset=args.offset)
        print(f"merged graph: {result['path']} inputs {result['inputs']} -> y {result['shape']}")
        print(f"PE subgraph up to the float cast: {' -> '.join(result['pe_ops'])}")
        print(f"max |onnxruntime - PyTorch| = {result['max_abs_err']:.3g} (tolerance {ATOL})")
        print(f"graft's own check: {'; '.join(map(str, result['graft'].checks))}")
        ok = (result["max_abs_err"] <= ATOL and set(result["pe_ops"]) <= INTEGER_OPS
              and bool(result["graft"]))
        print("OK" if ok else "MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
