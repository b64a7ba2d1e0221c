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


# ---- a transformers T5 decoder exported with its KV cache (issue 40) -------------------------

# A tiny T5 of a config nobody tuned graft to (tests/_hf_models.py's sizes): 16 causal buckets
# (8 exact), max_distance 32; 2 decoder layers of 4 heads of 8.
T5_CONFIG = {"vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
             "num_heads": 4, "relative_attention_num_buckets": 16,
             "relative_attention_max_distance": 32, "decoder_start_token_id": 0}


def t5_decoder(cross_cache: bool = True):
    """``(module, names, outputs)``: a seeded ``T5ForConditionalGeneration``'s decoder step with
    its KV cache as plain tensors, as Optimum's ``decoder_with_past`` names them:
    ``input_ids [B, S]`` (the decoder's), then with ``cross_cache`` ``encoder_attention_mask
    [B, E]`` and per layer ``past_key_values.i.decoder.key/value [B, 4, P, 8]`` and
    ``past_key_values.i.encoder.key/value [B, 4, E, 8]`` (the cross-attention's, reused as
    generation does), else ``encoder_hidden_states [B, E, 32]`` and the decoder's cache alone
    (the cross keys recomputed each step) -> ``logits``, ``present.i.decoder.key/value [B, 4,
    P + S, 8]``. No position input: T5's decoder puts its queries at ``P ..`` from the cache's
    length (``T5Attention.compute_bias(..., past_seen_tokens)``). Eager attention: torch 2.13's
    dynamo export of the SDPA one fails ("Cannot view a tensor with shape [B, S, 4, 8] and
    strides ... as a tensor with shape (B, S, 32)")."""
    import torch
    import transformers as tf
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    torch.manual_seed(0)
    lm = tf.T5ForConditionalGeneration(tf.T5Config(**T5_CONFIG,
                                                   attn_implementation="eager")).eval()
    layers, width = lm.config.num_decoder_layers, lm.config.d_model

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, encoder, *past):
            own, cross = DynamicCache(config=lm.config), DynamicCache(config=lm.config)
            per = 4 if cross_cache else 2
            for i in range(layers):
                own.update(past[per * i], past[per * i + 1], i)
                if cross_cache:  # (a cross cache of keys: T5 reuses it, is_updated)
                    cross.update(past[per * i + 2], past[per * i + 3], i)
            if cross_cache:  # the encoder's output is not read, only its length
                mask, states = encoder, torch.zeros(*encoder.shape, width)
            else:
                mask, states = None, encoder
            out = self.lm(encoder_outputs=(states,), attention_mask=mask,
                          decoder_input_ids=input_ids, cache=EncoderDecoderCache(own, cross),
                          use_cache=True)
            flat = []
            for layer in out.past_key_values.self_attention_cache.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    kinds = ("decoder", "encoder") if cross_cache else ("decoder",)
    names = ["input_ids", "encoder_attention_mask" if cross_cache else "encoder_hidden_states",
             *[f"past_key_values.{i}.{kind}.{k}" for i in range(layers) for kind in kinds
               for k in ("key", "value")]]
    outputs = ["logits", *[f"present.{i}.decoder.{k}" for i in range(layers)
                           for k in ("key", "value")]]
    return Decoder().eval(), names, outputs


def t5_decoder_inputs(names, batch: int, seq: int, past: int, source: int, seed: int = 0):
    """Inputs of ``t5_decoder``'s ``names`` (torch tensors): token ids, an encoder mask of ones
    but the last key of row 0, encoder states and caches standard normal."""
    import torch

    g = torch.Generator().manual_seed(seed)
    args = []
    for name in names:
        if name == "input_ids":
            args.append(torch.randint(0, T5_CONFIG["vocab_size"], (batch, seq), generator=g))
        elif name == "encoder_attention_mask":
            mask = torch.ones(batch, source, dtype=torch.long)
            mask[0, -1] = 0
            args.append(mask)
        elif name == "encoder_hidden_states":
            args.append(torch.randn(batch, source, T5_CONFIG["d_model"], generator=g))
        else:
            length = source if ".encoder." in name else past
            args.append(torch.randn(batch, T5_CONFIG["num_heads"], length, T5_CONFIG["d_kv"],
                                    generator=g))
    return tuple(args)


def export_t5_decoder(path, cross_cache: bool = True, dynamo: bool = False):
    """``t5_decoder`` written to ``path`` by ``torch.onnx.export`` (TorchScript at opset 18, or
    dynamo), every batch, length, cache and source length dynamic; returns the module and
    names."""
    import torch

    module, names, outputs = t5_decoder(cross_cache)
    args = t5_decoder_inputs(names, 2, 3, 5, 7)
    role = {"input_ids": "decoder_sequence_length", "encoder_attention_mask":
            "encoder_sequence_length", "encoder_hidden_states": "encoder_sequence_length"}
    length = {n: role.get(n, "encoder_sequence_length" if ".encoder." in n
                          else "past_decoder_sequence_length") for n in names}
    if dynamo:
        dims = {d: torch.export.Dim(d) for d in set(length.values()) | {"batch"}}
        shapes = [{0: dims["batch"], 1 if n in role else 2: dims[length[n]]} for n in names]
        torch.onnx.export(module, args, str(path), dynamo=True, input_names=names,
                          output_names=outputs,
                          dynamic_shapes=(*shapes[:2], tuple(shapes[2:])), verbose=False)
    else:
        axes = {n: {0: "batch", 1 if n in role else 2: length[n]} for n in names}
        axes.update({"logits": {0: "batch", 1: "decoder_sequence_length"}}, **{
            n: {0: "batch", 2: "decoder_keys"} for n in outputs[1:]})
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=18,
                          input_names=names, output_names=outputs, dynamic_axes=axes)
    return module, names
