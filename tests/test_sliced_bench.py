"""``scripts/bench.py --part sliced``'s bounds of the fused form (issue 44 point 5: why N = 512
misses 2.5x the cache): ``passes`` (the lowest slice's Gather, the RotaryEmbedding and the copy
into ``[N, d]``, slice indices fed in) and ``unfolded`` (plus the slicing, no CUDA fold) must be
the shipped ``--rope-lowering ort`` graph's own arithmetic minus those stages, or their timings
bound a different graph. Timings themselves are not tested (a shared 2-core machine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx

from tests.test_sliced import make, run

ROOT = Path(__file__).resolve().parents[1]


def bench_sliced():
    spec = importlib.util.spec_from_file_location("bench_sliced",
                                                  ROOT / "scripts" / "bench_sliced.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fused_bounds_are_the_shipped_graph_minus_fold_and_slicing(tmp_path):
    """At every position the default plan (8, 7) holds, negatives included, ``unfolded`` and
    ``passes`` give the shipped fused graph's rows bit for bit (the same Gather, the same
    RotaryEmbedding on the same caches), and their nodes are exactly the stages the bench names:
    three for ``passes``, those three after five slicing nodes for ``unfolded``, none of the
    shipped graph's fold (``Shape``, ``Mod``, ``Expand``, ``Concat``, ``Slice``)."""
    bench = bench_sliced()
    _, module, shipped = make("rope", bench.MAX_LEN, bench.D_MODEL,
                              extra={"rope_lowering": "ort"})
    paths = bench._fused_floor_graphs(module, tmp_path)
    positions = np.arange(-bench.MAX_LEN + 1, bench.MAX_LEN, dtype=np.int64)
    (want,) = run(shipped, positions=positions)
    (unfolded,) = run(onnx.load(str(paths["unfolded"])), positions=positions)
    low = (positions & ((1 << bench.LOW_BITS) - 1)).reshape(-1, 1)
    top = ((positions >> bench.LOW_BITS) & ((1 << (bench.TOP_BITS + 1)) - 1)).reshape(-1, 1)
    (passes,) = run(onnx.load(str(paths["passes"])), low_ids=low, top_ids=top)
    assert want.shape == unfolded.shape == passes.shape == (len(positions), bench.D_MODEL)
    assert np.array_equal(unfolded, want) and np.array_equal(passes, want)
    ops = {name: [n.op_type for n in onnx.load(str(path)).graph.node]
           for name, path in paths.items()}
    assert ops["passes"] == ["Gather", "RotaryEmbedding", "Reshape"]
    assert ops["unfolded"] == ["BitwiseAnd", "Reshape", "BitwiseAnd", "Div", "Reshape",
                               *ops["passes"]]
    shipped_ops = {n.op_type for n in shipped.graph.node}
    assert {"Shape", "Mod", "Expand", "Slice"} <= shipped_ops  # the fold the bounds leave out
