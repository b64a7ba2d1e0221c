"""The proofs of ``edgepe.patch``: each replaced module, then the whole model.

Module: the original and the replacement run at every position ``0 .. L - 1`` in one batch (and,
for longrope's two sets, at ``0 .. P - 1`` too, the batch that keeps the short set), per layer
type; the max abs difference of cos and sin must be within the mode's bound:

- ``table``: 0. The tables are the original's own float32 outputs at those positions, gathered
  and cast to ``x.dtype`` as the original casts them: bit-identical.
- ``sliced``: ``sliced.bound(widths, a)`` (the slices against the float64 definition ``a cos(p
  w)`` with the module's float32 ``w``: edgepe.graphs.sliced) plus the original's own distance
  from that definition: its float32 angle ``fl(p w)`` is within ``2^-24 p w`` of ``p w`` (and
  ``|d cos| <= |d angle|``), its float32 cos/sin within 2 ulp (``2^-23`` below 1; torch's CPU
  kernels are within 1 ulp) and its product by ``a`` rounded once (``U(a)``).

Multimodal RoPE is run, besides the text batch (every stream the position), on three streams
that differ at every position (``0 .. L - 1``, reversed, rotated by ``L // 3``), so each
section is checked against its own stream. T5's bias: the original's ``compute_bias`` and the
replacement for ``L`` queries over ``L`` keys (every relative distance ``-(L - 1) .. L - 1``) and
for 3 queries after ``L - 3`` cached ones; bound 0 (integer buckets, then the same table rows).

Model: the patched model's logits against the original's, recorded before the swap, on four
inputs: a batch of two, left padding (positions from the mask's cumsum, as ``generate`` makes
them), a KV cache (a prefix, then the rest with the cache: both steps' logits) and an offset
(the last positions below ``L``). ``table``: exact (0), the same cos/sin bit for bit through the
same kernels. ``sliced``: ``LOGITS_SLICED`` (module doc of ``edgepe.patch``). An
encoder-decoder (T5) gets a batch, a padded source (the second row's last half masked) and a
decoder KV cache (a prefix, then the rest); a multimodal RoPE model also gets three position
streams that differ (``position_ids [3, B, S]``, as an image's grid makes them).
"""

from __future__ import annotations

import inspect
import math

import torch

from edgepe.graphs.sliced import bound as sliced_bound
from edgepe.graphs.sliced import default_plan
from edgepe.patch.build import longrope_limit, run_original

# The sliced cos/sin differ from the original's by up to ~1e-6 (the bound); through a few layers
# of attention and MLP a float32 logit moves by that times the weights' gain. 1e-4 absolute is
# what the random-weight test models (2 layers, width 32, logits ~0.1-1) leave far below
# (measured 5e-7 on tiny Llama at L = 256); a user's model states its own measured figure.
LOGITS_SLICED = 1e-4
SEQ = 8  # the proof's sequence length (KV cache: a prefix of SEQ - 3, then 3)


def module_bound(found, mode: str, max_len: int) -> float:
    """The bound the replaced module is held to (module docstring)."""
    if mode == "table" or found.kind == "t5-bias":
        return 0.0
    module, worst = found.module, 0.0
    widths = default_plan(max_len)
    for layer_type in found.layer_types:
        name = "attention_scaling" if layer_type is None else f"{layer_type}_attention_scaling"
        a = float(getattr(module, name))
        freq = getattr(module, "inv_freq" if layer_type is None else f"{layer_type}_inv_freq")
        limit = longrope_limit(module, layer_type)
        # longrope's two sets: the largest frequency of either (the long set's are no larger)
        w = float(freq.float().abs().max())
        if limit is not None:
            orig = "original_inv_freq" if layer_type is None else f"{layer_type}_original_inv_freq"
            w = max(w, float(getattr(module, orig).float().abs().max()))
        angle = (max_len - 1) * w
        ua = 2.0 ** (math.frexp(max(a, 1.0))[1] - 25) if a > 1 else 2.0**-25
        original = max(a, 1.0) * (2.0**-24 * angle + 2.0**-23) + ua
        worst = max(worst, sliced_bound(widths, a) + original)
    return worst


@torch.no_grad()
def prove_module(found, replacement, max_len: int) -> float:
    """The max abs difference of ``replacement`` and the original at every position
    ``0 .. L - 1`` (and ``0 .. P - 1`` for longrope), over every layer type (module
    docstring: mrope's streams, T5's distances)."""
    if found.kind == "t5-bias":
        return _prove_t5(found, replacement, max_len)
    worst = 0.0
    if found.mrope:
        ramp = torch.arange(max_len)
        streams = torch.stack([ramp, ramp.flip(0), ramp.roll(max_len // 3)])[:, None, :]
        x = torch.zeros(1, 1, dtype=torch.float32)
        for r, g in zip(found.module(x, streams), replacement(x, streams), strict=True):
            if r.shape != g.shape or g.dtype != r.dtype:
                return math.inf
            worst = max(worst, float((r - g).abs().max()))
    for layer_type in found.layer_types:
        batches = [torch.arange(max_len)]
        limit = longrope_limit(found.module, layer_type)
        if limit is not None and max_len > limit:
            batches.append(torch.arange(limit))
        for positions in batches:
            ref = run_original(found.module, layer_type, positions)
            x = torch.zeros(1, 1, dtype=torch.float32)
            kw = {} if layer_type is None else {"layer_type": layer_type}
            got = replacement(x, positions[None, :], **kw)
            if len(got) != 2:
                return math.inf
            for r, g in zip(ref, got, strict=True):
                if r.shape != g[0].shape or g.dtype != torch.float32:
                    return math.inf
                worst = max(worst, float((r - g[0]).abs().max()))
    return worst


def _prove_t5(found, replacement, max_len: int) -> float:
    worst = 0.0
    original = type(found.module).compute_bias  # the class's method, whatever shadows it
    tail = min(3, max_len)
    for q, k, past in ((max_len, max_len, 0), (tail, max_len, max_len - tail)):
        ref = original(found.module, q, k, past_seen_tokens=past)
        got = replacement(q, k, past_seen_tokens=past)
        if ref.shape != got.shape or ref.dtype != got.dtype:
            return math.inf
        worst = max(worst, float((ref - got).abs().max()))
    return worst


def _takes(model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def cases(model, max_len: int, seed: int = 0,
          mrope: bool = False) -> list[tuple[str, list[dict]]]:
    """The proof's inputs: ``(name, steps)``, each step the keyword arguments of one forward
    (a KV cache case has two: the second gets the first's ``past_key_values``)."""
    g = torch.Generator().manual_seed(seed)
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = int(text.vocab_size)  # a multimodal model's is its text config's (Qwen2-VL)
    seq = min(SEQ, max_len)
    ids = torch.randint(0, vocab, (2, seq), generator=g)
    ones = torch.ones_like(ids)
    extra = {"decoder_input_ids": ids} if getattr(model.config, "is_encoder_decoder", False) \
        else {}
    out = [("batch", [{"input_ids": ids, "attention_mask": ones, **extra}])]
    if extra:
        padded = ones.clone()
        padded[1, seq // 2:] = 0  # the second source row padded (T5 pads on the right)
        out.append(("padded source", [{"input_ids": ids, "attention_mask": padded, **extra}]))
        if seq > 3 and _takes(model, "use_cache"):
            cut = seq - 3
            out.append(("KV cache", [
                {"input_ids": ids, "attention_mask": ones, "decoder_input_ids": ids[:, :cut],
                 "use_cache": True},
                {"input_ids": ids, "attention_mask": ones, "decoder_input_ids": ids[:, cut:],
                 "use_cache": True}]))
        return out
    if not _takes(model, "position_ids"):
        return out
    mask = ones.clone()
    mask[1, : seq // 2] = 0  # the second row left-padded
    left = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    out.append(("left padding", [{"input_ids": ids, "attention_mask": mask,
                                  "position_ids": left}]))
    if seq > 3 and _takes(model, "use_cache"):
        cut = seq - 3
        pos = torch.arange(seq).expand(2, seq)
        out.append(("KV cache", [
            {"input_ids": ids[:, :cut], "attention_mask": ones[:, :cut],
             "position_ids": pos[:, :cut], "use_cache": True},
            {"input_ids": ids[:, cut:], "attention_mask": ones, "position_ids": pos[:, cut:],
             "use_cache": True}]))
    if mrope:
        ramp = torch.arange(seq)
        grid = torch.stack([ramp, ramp.flip(0), ramp.roll(seq // 3)])[:, None].expand(3, 2, seq)
        out.append(("3 streams", [{"input_ids": ids, "attention_mask": ones,
                                   "position_ids": grid}]))
    start = max_len - seq
    out.append((f"offset {start}", [{"input_ids": ids, "attention_mask": ones,
                                     "position_ids": torch.arange(start, max_len).expand(2, seq)}]))
    return out


@torch.no_grad()
def run_cases(model, inputs: list[tuple[str, list[dict]]]) -> list[list[torch.Tensor]]:
    """The logits of every step of every case."""
    results = []
    for _, steps in inputs:
        logits, past = [], None
        # transformers 5.24 names the KV cache ``cache`` (``past_key_values`` is deprecated)
        key = "cache" if _takes(model, "cache") else "past_key_values"
        for step in steps:
            kw = dict(step)
            if past is not None:
                kw[key] = past
            out = model(**kw)
            past = getattr(out, key, None) if kw.get("use_cache") else None
            logits.append(out.logits.float().clone())
        results.append(logits)
    return results


def max_diff(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> float:
    worst = 0.0
    for xs, ys in zip(a, b, strict=True):
        for x, y in zip(xs, ys, strict=True):
            if x.shape != y.shape:
                return math.inf
            worst = max(worst, float((x - y).abs().max()))
    return worst
