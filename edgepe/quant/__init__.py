"""int8 quantisation with proven error bounds (issue 5): tables and ONNX graphs.

- ``quantize_table(config, module) -> (quant manifest, int8 chunks)``: what the npy/bin/C writers
  call for ``--quantize int8`` (two passes over ``iter_table`` for the scales and the measured
  error, then the int8 chunks, lazily);
- ``edgepe.quant.graphs.build_int8(config, module, manifest) -> onnx.ModelProto``: the int8 ONNX
  graph for either mode (imports onnx, so it is not imported here).

The math and the proofs are in ``edgepe.quant.int8``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

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
    "quantize_table",
    "scales",
    "table_quant",
]


def quantize_table(config, module) -> tuple[dict[str, Any], Iterator[np.ndarray]]:
    """``(quant manifest section, int8 chunks)`` of ``config``'s table, row order, bounded memory.

    Raises ``BadParameterError`` for exact schemes and non-float32 ``--dtype``.
    """
    from edgepe.export.table_values import iter_table

    tq = table_quant(config, module)
    return tq.manifest(), tq.chunks(iter_table(config.scheme, module))
