"""T5's relative position bias in an ONNX export: found by its values, spliced as integer buckets
(issue 40 point 3).

T5 (transformers' ``T5Attention.compute_bias``) adds ``E[bucket(u - t)]`` to every attention's
logits, ``E`` the ``relative_attention_bias`` weight ``[num_buckets, H]``; each stack's first
self-attention computes it (the encoder's bidirectional, the decoder's causal), the later layers
reuse it. An export computes ``relative = memory - context`` (int64 ``[Q, K]``), its bucket with
a float32 ``Log``, ``Div``, ``Cast``, ``Min``, ``Where``, and ``Gather(E, bucket)``. ``discover``
sees that ``Gather`` as a constant table read by a square index that is not positions; here:

1. The relative positions (``relative_candidates``, ``fit``): the nearest integer tensor up
   from the index (a bounded walk, ``CONE_LIMIT`` nodes) whose values are ``k - q + c`` on every
   probing run (``discover._runs``; one constant ``c``: a cache's offset), whatever op made it.
2. The model's bucket function (``bucket_function``): the index's cone cut at those relative
   positions (it may read nothing else but constants: else this is no function of the relative
   position alone) run once on onnxruntime over every relative position ``|r| <= SWEEP``.
3. The fit (``fit_buckets``), against edgepe's ``t5-bias`` bucket (``relative_position_bucket``,
   transformers' op for op): causal when every later key reads bucket 0, bidirectional when a
   later key at distance ``a`` reads the earlier one's bucket plus ``B``; ``B`` (the buckets of
   a direction) is the last bucket plus 1, ``num_buckets`` the table's rows where they agree
   (else ``B`` or ``2B``); ``max_distance`` is every value for which edgepe's bucket equals the
   model's at each distance up to the one from which it stays the last (two binary searches:
   T5's bucket of a distance does not increase with ``max_distance``); then the bucket graph
   graft puts in (``bucket_graph``) is run over the whole sweep and required equal to the
   model's. Buckets are integers: equal means equal, element for element.

Several values of ``max_distance`` can give the same buckets (T5's tiny test configs: 8
bidirectional buckets, max_distance 13 to 18). An encoder-decoder's stacks share one config
(``T5Config.relative_attention_max_distance``), so their ranges are intersected (the causal
decoder's usually pins it); within what is left a power of two is taken where there is one (every
published T5 config uses 128), else the lowest. The report says the range.

``build_t5``: the PE put in place of the model's bucket tensor: edgepe's integer bucket graph
(``graphs.bias.t5_bucket``: a ``Gather`` of the integer lookup ``T5Bias.magnitude_buckets`` at the
clamped distance, no ``Log``) reading the model's own relative positions; the model's ``Gather``
of its ``relative_attention_bias`` rows (its learned parameters) stays, so the bias is the same
rows, bit for bit. The float bucket computation, ``Log`` included, goes with the replaced
tensor's producers (``splice_found``).
"""

from __future__ import annotations

from typing import Any

from edgepe.contract.errors import BadParameterError
from edgepe.graft.find_hf import Found, _origin
from edgepe.graft.prove import _session, cone_model, cone_of
from edgepe.graft.splice import _opset, _value_type

# How far up from the bucket index the walk for the relative positions goes (nodes); T5's
# TorchScript export has 14 nodes between them.
CONE_LIMIT = 48
# Relative positions swept through the model's bucket function, -SWEEP .. SWEEP: the t5-bias
# scheme's largest max_distance (every T5 distance from there on is the last bucket).
SWEEP = 1 << 20
MAX_DISTANCE_HIGH = 1 << 20  # the t5-bias scheme's max_distance bound
# graft's positions for a T5 bias given no --max-len: this many times max_distance, so that the
# proof's every-position pass reaches well past the distance from which buckets stay the last
# (edgepe patch's default: 512 for T5).
MAX_LEN_FACTOR = 4


def square(index) -> bool:
    """Whether ``index`` is a square ``[.., S, S]`` integer tensor (``S > 1``), as T5's buckets
    of relative positions are."""
    return index.ndim >= 2 and index.shape[-1] == index.shape[-2] and index.shape[-1] > 1 and \
        index.dtype.kind in "iu"


def relative_candidates(index: str, makers, consts, limit: int = CONE_LIMIT) -> list[str]:
    """The tensors up from ``index`` (breadth first, nearest first; ``limit`` nodes), the ones
    its relative positions may be."""
    out, seen, todo, count = [], {index}, [index], 0
    while todo and count < limit:
        node = makers.get(todo.pop(0))
        if node is None:
            continue
        count += 1
        for name in node.input:
            if name and name not in seen and name not in consts:
                seen.add(name)
                out.append(name)
                todo.append(name)
    return out


def is_relative(values) -> bool:
    """Whether int64 ``values [.., Q, K]`` is ``k - q + c`` for one constant ``c`` (``Q``,
    ``K`` > 1 on this run: both axes seen moving)."""
    import numpy as np

    values = np.asarray(values)
    if values.dtype != np.int64 or values.ndim < 2 or min(values.shape[-2:]) < 2:
        return False
    q, k = values.shape[-2:]
    c = values.reshape(-1)[0]
    return bool(np.array_equal(values, np.broadcast_to(
        np.arange(k)[None, :] - np.arange(q)[:, None] + c, values.shape)))


def bucket_function(model, index: str, relative: str):
    """``r [1, .., N] int64 -> buckets``: an onnxruntime session of ``index``'s cone cut at
    ``relative`` (its input), or None when that cone reads a model input other than through
    ``relative`` (then the index is no function of the relative positions alone)."""
    import onnx
    from onnx import helper

    fed = helper.make_tensor_value_info(relative, onnx.TensorProto.INT64, None)
    nodes, used = cone_of(model.graph, [index], frozenset([relative]))
    made = {o for n in nodes for o in n.output} | {relative}
    if used - made - {t.name for t in model.graph.initializer}:
        return None
    return _session(cone_model(model, [index], cut=[fed]))


def sweep(session, relative: str, ndim: int):
    """The buckets of every relative position ``-SWEEP .. SWEEP`` (int64 ``[2 SWEEP + 1]``), or
    None when the function is not elementwise (another shape, not integers)."""
    import numpy as np

    r = np.arange(-SWEEP, SWEEP + 1, dtype=np.int64).reshape((1,) * (ndim - 1) + (-1,))
    out = np.asarray(session.run(None, {relative: r})[0])
    if out.shape != r.shape or out.dtype.kind not in "iu":
        return None
    return out.reshape(-1).astype(np.int64)


def _reference(distances, bidirectional: bool, num_buckets: int, max_distance: int):
    """edgepe's t5-bias bucket of ``-distances`` (a key ``a`` positions before the query)."""
    import torch

    from edgepe.schemes.t5_bias import relative_position_bucket

    return relative_position_bucket(-torch.as_tensor(distances), bidirectional, num_buckets,
                                    max_distance).numpy()


def fit_buckets(buckets, rows: int) -> dict[str, Any] | None:
    """``{direction, num_buckets, max_distance_range (lo, hi)}`` when the swept ``buckets``
    (``bucket(r)`` at ``r = -SWEEP .. SWEEP``) are edgepe's t5-bias bucket for that direction,
    num_buckets and every max_distance in ``lo .. hi`` (module doc, step 3) up to the distance
    from which they stay the last, else None (``find_t5`` then runs edgepe's bucket graph over
    the whole sweep). ``rows``: the rows of the table the model gathers by them."""
    import numpy as np

    before = buckets[SWEEP::-1]  # bucket(-a), a = 0 .. SWEEP
    after = buckets[SWEEP + 1:]  # bucket(a), a = 1 .. SWEEP
    per = int(before.max()) + 1  # B: a direction's buckets (its last reached at max_distance)
    if per < 2 or before.min() < 0:
        return None
    if not after.any():
        bidirectional, num_buckets = False, per
    elif np.array_equal(after, before[1:] + per):
        bidirectional = True
        num_buckets = rows if rows in (2 * per, 2 * per + 1) else 2 * per  # (odd: one row unused)
    else:
        return None
    if num_buckets > rows:  # a bucket past the table: not what the table is for
        return None
    moving = np.flatnonzero(before != per - 1)
    stop = int(moving[-1]) + 1 if moving.size else 0  # C: the last bucket from here on
    if stop >= SWEEP // 2:
        return None
    want, distances = before[: stop + 1], np.arange(stop + 1)

    def edgepe(md: int):
        return _reference(distances, bidirectional, num_buckets, md)

    low = per // 2 + 1  # T5 divides by log(max_distance / max_exact): above the exact buckets

    # bucket(a) does not increase with max_distance: "edgepe's <= the model's" holds from some
    # max_distance on, ">=" up to some; equal on the range between, when there is one
    def first(pred, lo: int, hi: int) -> int:  # the first md in lo .. hi where pred holds
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if pred(mid) else (mid + 1, hi)
        return lo

    lo = first(lambda md: bool(np.all(edgepe(md) <= want)), low, MAX_DISTANCE_HIGH)
    hi = first(lambda md: not np.all(edgepe(md) >= want), low, MAX_DISTANCE_HIGH + 1) - 1
    if lo > hi or not np.array_equal(edgepe(lo), want):
        return None
    direction = "bidirectional" if bidirectional else "causal"
    return {"direction": direction, "num_buckets": num_buckets, "max_distance_range": (lo, hi)}


def _choose(lo: int, hi: int) -> int:
    """The max_distance recorded out of ``lo .. hi`` (all give the same buckets): a power of two
    where the range holds one (every published T5 config: 128), else ``lo``."""
    power = 1 << (hi.bit_length() - 1)
    return power if power >= lo else lo


def find_t5(model, tables: list[dict], runs_of, makers, consts, inputs: set[str]
            ) -> tuple[list[Found], list[str]]:
    """``(found, seen)``: each of ``tables`` (``discover.candidates``' table entries whose index
    is square and not positions) that is T5's bias (module doc) as a ``t5-bias`` ``Found``
    replacing its bucket index; what the others are, in words. ``runs_of(names)``: the probing
    runs' values (``discover._runs``)."""
    import numpy as np

    relatives = {t["index"]: relative_candidates(t["index"], makers, consts) for t in tables}
    names = list(dict.fromkeys(n for t in tables for n in [t["index"], *relatives[t["index"]]]))
    runs = runs_of(names)
    fits, seen = [], []
    for t in tables:
        node, table, index = t["node"], t["table"], t["index"]
        said = (f"a constant table {node.input[0]!r} {list(table.shape)} gathered by {index!r} "
                f"{list(np.asarray(runs[0][0][index]).shape)}, a square index as T5's "
                "relative-position buckets are, but ")
        relative = next((r for r in relatives[index] if all(
            is_relative(values[r]) for values, _, _ in runs)), None)
        if relative is None or np.asarray(runs[0][0][index]).dtype != np.int64:
            seen.append(said + "no int64 relative positions k - q above it (within "
                        f"{CONE_LIMIT} nodes)")
            continue
        try:
            session = bucket_function(model, index, relative)
            buckets = None if session is None else sweep(session, relative,
                                                         np.asarray(runs[0][0][relative]).ndim)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][-200:]
            seen.append(said + f"its subgraph from the relative positions {relative!r} does not "
                        f"run on one row of them ({first})")
            continue
        fitted = None if buckets is None else fit_buckets(buckets, table.shape[0])
        if fitted is None:
            seen.append(said + f"its values are not T5's buckets of the relative positions "
                        f"{relative!r} for any direction, num_buckets and max_distance")
            continue
        fits.append((t, relative, fitted, buckets))
    if not fits:
        return [], seen
    # one config for every stack (module doc): the ranges intersected where they meet
    lo = max(f["max_distance_range"][0] for _, _, f, _ in fits)
    hi = min(f["max_distance_range"][1] for _, _, f, _ in fits)
    found = []
    for t, relative, fitted, buckets in fits:
        own_lo, own_hi = (lo, hi) if lo <= hi else fitted["max_distance_range"]
        max_distance = _choose(own_lo, own_hi)
        params = {"num_buckets": fitted["num_buckets"], "max_distance": max_distance,
                  "direction": fitted["direction"]}
        # the graph graft puts in, over the whole sweep: the model's buckets, every one
        mine = sweep(_session(bucket_graph(params, None, _opset(model))[0]), "relative", 1)
        if not np.array_equal(mine, buckets):
            seen.append(f"T5's buckets at {t['index']!r}: edgepe's bucket graph for {params} "
                        f"differs from them at {int(np.sum(mine != buckets))} relative positions")
            continue
        rows, heads = t["table"].shape
        same = fitted["max_distance_range"]
        where = (f"({fitted['direction']}, num_buckets {fitted['num_buckets']}"
                 + (f" of the table's {rows} rows" if rows != fitted["num_buckets"] else "")
                 + f", max_distance {max_distance}"
                 + (f" ({same[0]}..{same[1]} give these buckets)" if same[0] != same[1] else "")
                 + f"; the model's buckets of k - q equal edgepe's at every |k - q| <= 2^"
                 f"{SWEEP.bit_length() - 1}) at Gather {t['node'].output[0]!r} of "
                 f"{t['node'].input[0]!r} [{rows}, {heads}], relative positions "
                 f"{_origin(relative, makers, inputs)}")
        found.append(Found("t5-bias", [t["index"]], relative, where, {
            "direction": fitted["direction"], "num_buckets": fitted["num_buckets"],
            "max_distance": max_distance, "max_distance_range": list(same),
            "table_name": t["node"].input[0], "heads": heads, "discovered": True}))
    return found, seen


def declared_max_len(found: list[Found]) -> tuple[int, str]:
    """graft's positions for T5 biases given no ``--max-len``: ``MAX_LEN_FACTOR`` x the largest
    max_distance, and where that came from."""
    top = max(f.params["max_distance"] for f in found)
    return MAX_LEN_FACTOR * top, (f"{MAX_LEN_FACTOR} x T5's max_distance {top} (the proof's "
                                  "distances reach past the last bucket's)")


def bucket_graph(params: dict[str, Any], dims, opset: int):
    """``(model, lut)``: ``relative`` int64 (``dims``; None: any shape) -> ``bucket`` int64 of
    the same shape, edgepe's t5-bias bucket graph (``graphs.bias.t5_bucket``) for ``params``
    (num_buckets, max_distance, direction), and its distance lookup ``lut``."""
    from onnx import TensorProto, helper

    from edgepe.graphs._common import Graph
    from edgepe.graphs.bias import t5_bucket
    from edgepe.schemes import build as build_scheme
    from edgepe.schemes import resolve

    lut = build_scheme(resolve("t5-bias", 8, heads=1, params=params)).magnitude_buckets().numpy()
    g = Graph("edgepe_t5_buckets")
    bucket = t5_bucket(g, "relative", lut, params["direction"] == "bidirectional",
                       params["num_buckets"] // 2)
    g.rename(bucket, "bucket")
    dims = [d if d is not None else f"relative_{i}" for i, d in enumerate(dims)] \
        if dims is not None else None
    graph = helper.make_graph(
        g.nodes, "edgepe_t5_buckets",
        [helper.make_tensor_value_info("relative", TensorProto.INT64, dims)],
        [helper.make_tensor_value_info("bucket", TensorProto.INT64, dims)], g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, lut


def build_t5(model, found: Found, max_len: int | None, quantize: str = "none",
             mode: str | None = None):
    """``(pe ModelProto, record)``: ``relative`` (the model's relative positions) -> ``bucket``
    int64 of the same shape, edgepe's integer bucket graph at the model's opset (module doc)."""
    if quantize not in (None, "none"):
        raise BadParameterError(f"--quantize {quantize}: T5's bias goes in as integer buckets; "
                                "the model's own rows are gathered by them, nothing to quantise")
    if mode not in (None, "compute"):  # (its bucket of a distance is already a lookup)
        raise BadParameterError(f"--mode {mode}: T5's bias goes in as its integer bucket graph "
                                "(--mode compute: a lookup of each clamped distance's bucket, "
                                "no Log), the model's own rows gathered by it")
    p = found.params
    params = {"num_buckets": p["num_buckets"], "max_distance": p["max_distance"],
              "direction": p["direction"]}
    pe, lut = bucket_graph(params, _value_type(model, found.positions)[1], _opset(model))
    record = {"scheme": "t5-bias", **params, "max_distance_range": p["max_distance_range"],
              "distance_buckets": lut.tolist(), "table": p["table_name"], "dtype": "int64",
              "mode": "compute", "quantize": "none", "max_len": max_len,
              "replaces": found.replaces, "positions": found.positions}
    return pe, record
