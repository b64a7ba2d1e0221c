"""Verify a streamed ONNX table graph with its table read in place, never loaded (issue 19).

``edgepe export`` writes a table graph as the model without its table, then the protobuf
fragment ``graph { initializer { table } }`` whose raw data runs to the end of the file
(``edgepe.graphs.table.streamed``). Loading such a file whole costs several copies of the
table: the file's bytes, the parsed ``ModelProto``, then each runtime's own copy (onnxruntime
reads and converts it, the reference evaluator holds the proto and a NumPy array): ``verify``
of a 65536 x 512 float32 table peaked at 4.7x the table, imports included.

``split_table`` recognises that layout from the manifest alone: the fragment's header is a
function of the table's shape and dtype (``table_fragment_header``), so the file must end with
exactly that header and ``rows x cols`` bytes of data. It then parses only the part before it
(the graph, a few KB) and maps the table read-only (``numpy.memmap``). The runtimes run the very
same nodes with ``table`` turned from an initializer into a graph input fed the mapped rows
(onnxruntime and the reference evaluator take a contiguous NumPy input without copying it). The
checker sees the graph
with a one-row stand-in for the table, as ``streamed`` checked it when exporting. Any other file
(a different layout, an initializer already called ``table``) returns ``None`` and is loaded
whole, as before. After each run the runtimes ``release`` the pages it touched, so the resident
set holds a chunk's rows, not the table; a 65536 x 512 float32 table then verifies at 2.4x the
table's bytes, imports included (docs/readme/int8-speed.md).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgepe.contract.errors import EdgepeError

# The graph part of a table graph is a few KB (nodes, small constants, the embedded manifest);
# anything larger is not a file edgepe streamed, and is loaded the ordinary way.
MAX_GRAPH_BYTES = 16 * 2**20


@dataclass
class SplitTable:
    """A streamed table graph: the graph without its table, and the table mapped in place."""

    model: onnx.ModelProto  # no ``table`` initializer
    mapping: mmap.mmap  # the whole file, read-only
    table: np.ndarray  # [rows, cols], a read-only view of ``mapping``

    def release(self) -> None:
        """Drop the table pages a run touched from this process's resident set (they stay in
        the page cache): a sweep then holds one chunk's rows at a time, not the table."""
        if hasattr(mmap, "MADV_DONTNEED"):  # POSIX; elsewhere the OS trims the pages itself
            self.mapping.madvise(mmap.MADV_DONTNEED)

    def checkable(self) -> onnx.ModelProto:
        """The graph with a one-row stand-in table (no op reads the row count), to check."""
        from edgepe.graphs.table import TABLE

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        stand_in = np.zeros((1, self.table.shape[1]), self.table.dtype.newbyteorder("="))
        model.graph.initializer.append(numpy_helper.from_array(stand_in, TABLE))
        return model

    def runtime_model(self) -> onnx.ModelProto:
        """The graph with ``table`` as an input of its type and shape (``feeds`` fills it)."""
        from edgepe.graphs.table import TABLE

        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        elem = helper.np_dtype_to_tensor_dtype(self.table.dtype.newbyteorder("="))
        model.graph.input.append(
            helper.make_tensor_value_info(TABLE, elem, list(self.table.shape)))
        return model

    def feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from edgepe.graphs.table import TABLE

        return {**feeds, TABLE: self.table}


def split_table(path: Path, manifest: dict[str, Any]) -> SplitTable | None:
    """The graph and the mapped table of ``path`` if it is a table graph in edgepe's streamed
    layout for the shape and dtype its manifest describes; else ``None``."""
    from edgepe.graphs.table import NP_DTYPES, TABLE, table_fragment_header
    from edgepe.graphs.table_values import table_shape
    from edgepe.schemes import resolve

    if (manifest.get("format") != "onnx" or manifest.get("mode") != "table"
            or manifest.get("quant") or manifest.get("dtype") not in NP_DTYPES):
        return None
    try:
        config = resolve(manifest["scheme"], manifest["max_len"], manifest.get("d_model"),
                         manifest.get("heads"), manifest.get("params") or {})
        rows, cols = table_shape(config)
    except (EdgepeError, KeyError, TypeError, ValueError):
        return None  # the ordinary path reports what is wrong with the manifest
    dtype = np.dtype(NP_DTYPES[manifest["dtype"]]).newbyteorder("<")
    header = table_fragment_header(rows, cols, manifest["dtype"])
    graph_bytes = path.stat().st_size - rows * cols * dtype.itemsize - len(header)
    if not 0 < graph_bytes <= MAX_GRAPH_BYTES:
        return None
    with open(path, "rb") as f:
        body = f.read(graph_bytes)
        if f.read(len(header)) != header:
            return None
    try:
        model = onnx.load_from_string(body)
    except Exception:  # noqa: BLE001 - not a model: the ordinary path says so
        return None
    if any(t.name == TABLE for t in model.graph.initializer):
        return None
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    table = np.frombuffer(mapping, dtype=dtype, count=rows * cols,
                          offset=graph_bytes + len(header)).reshape(rows, cols)
    return SplitTable(model, mapping, table)
