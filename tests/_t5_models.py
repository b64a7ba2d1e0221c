"""T5's relative position bias built by hand as a T5 export computes it (tests/test_graft_t5.py,
tests/test_mut_graft.py): each stack's relative positions ``k - q`` from its input's length, T5's
float32 bucket op for op as transformers' ``T5Attention._relative_position_bucket`` exports
(``Log``, ``Div``, truncating ``Cast``, ``Min``, ``Where``), rows of a ``[num_buckets, H]``
table."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS = 2


def _stack(nodes, inits, ids: str, tag: str, direction: str | None, num_buckets: int,
           max_distance: int, past: str | None = None) -> str:
    """Nodes of one stack's bias ``[B, H, S, S]`` (``scores_<tag>``): relative positions
    ``k - q`` from ``ids``' length, T5's float32 bucket (``direction`` None: ``min(|k - q|,
    num_buckets - 1)``, a clipped distance that is no T5 bucket), rows of a ``[num_buckets,
    H]`` table, plus the ids so every token matters. ``past``: a cache input ``[B, H, P, d]``
    whose length ``P`` puts the queries at ``P ..`` and the keys at ``0 .. P + S - 1`` (T5's
    decoder after ``P`` cached tokens): ``[B, H, S, P + S]``."""
    def c(name, value, dtype):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), f"{tag}_{name}"))
        return f"{tag}_{name}"

    def op(kind, *inputs, **attrs):
        out = f"{tag}_{kind.lower()}{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    length = op("Gather", op("Shape", ids), c("one", 1, np.int64), axis=0)
    start, keys = c("zero", 0, np.int64), length
    if past is not None:
        start = op("Gather", op("Shape", past), c("two", 2, np.int64), axis=0)
        keys = op("Add", start, length)
    memory = op("Range", c("zero_", 0, np.int64), keys, c("one_", 1, np.int64))
    context = op("Range", start, keys, c("one__", 1, np.int64))
    rel = op("Sub", op("Unsqueeze", memory, c("ax0", [0], np.int64)),
             op("Unsqueeze", context, c("ax1", [1], np.int64)))  # memory - context: k - q
    if direction is None:
        bucket = op("Min", op("Abs", rel), c("top", num_buckets - 1, np.int64))
    else:
        n = num_buckets
        later = None
        if direction == "bidirectional":
            n //= 2
            later = op("Mul", op("Cast", op("Greater", rel, c("z", 0, np.int64)),
                                 to=TensorProto.INT64), c("n", n, np.int64))
            a = op("Abs", rel)
        else:
            a = op("Neg", op("Min", rel, op("ConstantOfShape", op("Shape", rel),
                                            value=numpy_helper.from_array(
                                                np.zeros(1, np.int64)))))
        exact = n // 2
        f = op("Div", op("Cast", a, to=TensorProto.FLOAT), c("me", exact, np.float32))
        f = op("Mul", op("Div", op("Log", f), c("lr", math.log(max_distance / exact),
                                                np.float32)), c("nl", n - exact, np.float32))
        large = op("Add", c("me_i", exact, np.int64), op("Cast", f, to=TensorProto.INT64))
        large = op("Min", large, c("last", n - 1, np.int64))
        bucket = op("Where", op("Less", a, c("me_", exact, np.int64)), a, large)
        if later is not None:
            bucket = op("Add", later, bucket)
    rng = np.random.default_rng(num_buckets + max_distance)
    table = c("relative_attention_bias", rng.standard_normal((num_buckets, HEADS)), np.float32)
    bias = op("Transpose", op("Gather", table, bucket, axis=0), perm=[2, 0, 1])
    along = [1, 3] if past is not None else [1, 2]  # the queries' ids, or the keys'
    tokens = op("Cast", op("Unsqueeze", ids, c("ax12", along, np.int64)), to=TensorProto.FLOAT)
    nodes.append(helper.make_node("Add", [bias, tokens], [f"scores_{tag}"]))
    return f"scores_{tag}"


def t5_like(*stacks, past: bool = False) -> onnx.ModelProto:
    """One stack per ``(direction, num_buckets, max_distance)``, the first reading
    ``input_ids``, the second ``decoder_input_ids`` (an encoder-decoder's two lengths);
    ``past``: the last stack after a cache ``past_key_values.0.key`` (``_stack``)."""
    nodes, inits, inputs, outputs = [], [], [], []
    for k, ((direction, num_buckets, max_distance), ids, tag) in enumerate(zip(
            stacks, ("input_ids", "decoder_input_ids"), ("enc", "dec"), strict=False)):
        cache = "past_key_values.0.key" if past and k == len(stacks) - 1 else None
        inputs.append(helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", ids]))
        if cache:
            inputs.append(helper.make_tensor_value_info(cache, TensorProto.FLOAT,
                                                        ["batch", HEADS, "past", 4]))
        out = _stack(nodes, inits, ids, tag, direction, num_buckets, max_distance, cache)
        outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [
            "batch", HEADS, ids, f"{ids}_keys" if cache else ids]))
    model = helper.make_model(helper.make_graph(nodes, "t5_like", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
