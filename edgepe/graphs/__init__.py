"""Graph builders: ``(ExportConfig, module, manifest) -> onnx.ModelProto``, one family a file.

``COMPUTE`` maps every scheme id with a compute mode to ``(module, function)`` in this package;
``--mode table`` uses ``table.build`` for every scheme. Modules import onnx, so they load lazily.
The layer also holds what the builders and the formats above share: ``table_values`` (a table's
rows from the reference module, chunk by chunk), ``quant`` (int8 quantisation and its proven
bounds; ``int8`` builds the int8 graphs) and ``untrusted`` (the ops the builders emit, and the
refusal of a graph they could not have written).
"""

from __future__ import annotations

import importlib

COMPUTE = {
    "binary": ("bits", "binary"),
    "binary-bits": ("bits", "binary_bits"),
    "binary-signed": ("bits", "binary_signed"),
    "binary-smooth": ("bits", "binary_smooth"),
    "gray": ("bits", "gray"),
    "binary-multilevel": ("bits", "binary_multilevel"),
    "integer": ("integer", "integer"),
    "integer-norm": ("integer", "integer_norm"),
    "integer-multiscale": ("integer", "integer_multiscale"),
    "integer-learnable": ("integer", "integer_learnable"),
    "hybrid-int-binary": ("bits", "hybrid_int_binary"),
    "binary-gated": ("bits", "binary_gated"),
    "fourier-binary": ("bits", "fourier_binary"),
    "binary-2d": ("bits", "binary_2d"),
    "hierarchical": ("bits", "hierarchical"),
    "sinusoidal": ("trig", "sinusoidal"),
    "sinusoidal-learned": ("trig", "sinusoidal_learned"),
    "rope": ("trig", "rope"),
    "alibi": ("bias", "alibi"),
    "gaussian": ("bias", "gaussian"),
    "t5-bias": ("bias", "t5_bias"),
    "mrope": ("trig", "mrope"),
}
# ``--mode sliced``: sin/cos from position bits and small tables (sliced.py).
SLICED = {"sinusoidal": "sinusoidal", "rope": "rope", "binary": "binary"}


def builder(scheme_id: str, mode: str):
    """The builder function for ``scheme_id`` in ``mode``."""
    if mode == "table":
        return importlib.import_module("edgepe.graphs.table").build
    if mode == "sliced":
        return getattr(importlib.import_module("edgepe.graphs.sliced"), SLICED[scheme_id])
    module_name, function = COMPUTE[scheme_id]
    return getattr(importlib.import_module(f"edgepe.graphs.{module_name}"), function)
