"""The model of the README's graft example: the demo notebook's ``BinaryPositionalEncoding(64,
512)`` then one ``nn.TransformerEncoderLayer(64, 4, 128)``, seeded, exported by torch.onnx's
dynamo exporter to ``model.onnx`` (or ``--out``)::

    python scripts/graft_example_model.py [--out model.onnx]
    edgepe graft model.onnx --scheme binary --quantize int8 --out model-edgepe-int8.onnx

The notebook's module is taken verbatim from ``tests/demo_notebook.py`` (a test keeps it a
verbatim excerpt of the notebook). Quiet: torch.onnx's own output is silenced. ``scripts/`` is
never imported by the package.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
D_MODEL, MAX_LEN, HEADS, FFN = 64, 512, 4, 128


def build():
    import torch
    from torch import nn

    sys.path.insert(0, str(ROOT / "tests"))
    from demo_notebook import BinaryPositionalEncoding

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            with contextlib.redirect_stdout(io.StringIO()):  # the notebook's constructor prints
                self.pe = BinaryPositionalEncoding(D_MODEL, MAX_LEN, dropout=0.0)
            self.layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.0,
                                                    batch_first=True)

        def forward(self, x):
            return self.layer(self.pe(x))

    torch.manual_seed(0)
    return Model().eval()


def export(out: Path) -> None:
    import torch

    model = build()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    dims = {0: torch.export.Dim("B", min=1, max=64), 1: torch.export.Dim("S", min=2, max=MAX_LEN)}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (torch.randn(2, MAX_LEN, D_MODEL),), dynamo=True,
                                    opset_version=18, input_names=["x"], output_names=["y"],
                                    dynamic_shapes=(dims,), verbose=False)
    program.save(str(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("model.onnx"))
    args = parser.parse_args(argv)
    export(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes): BinaryPositionalEncoding"
          f"({D_MODEL}, {MAX_LEN}) + TransformerEncoderLayer({D_MODEL}, {HEADS}, {FFN}), dynamo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
