"""int8 quantisation with proven error bounds (issue 5): tables and ONNX graphs.

- ``table_quant(config, module) -> TableQuant``: what the npy/bin/C writers call for
  ``--quantize int8`` (two passes over ``iter_table``: the scales, then the measured error);
  ``TableQuant.chunks`` quantises the table chunk by chunk and ``.manifest()`` is its ``quant``;
- ``edgepe.quant.graphs.build_int8(config, module, manifest) -> onnx.ModelProto``: the int8 ONNX
  graph for either mode (imports onnx, so it is not imported here).

The math and the proofs are in ``edgepe.quant.int8``.
"""

from __future__ import annotations

from edgepe.quant.int8 import (
    QMAX,
    QMIN,
    TableQuant,
    check_quantizable,
    dequantize,
    quantize,
    scales,
    table_quant,
)

__all__ = [
    "QMAX",
    "QMIN",
    "TableQuant",
    "check_quantizable",
    "dequantize",
    "quantize",
    "scales",
    "table_quant",
]
