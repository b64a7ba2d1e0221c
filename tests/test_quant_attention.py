"""Where int8 error matters: attention logits of a small random transformer layer.

A seeded attention layer (d_model 64, 4 heads of 16, L = 512) adds the positional encoding to
random token embeddings: ``h = x + P``. The int8 artifact (run on onnxruntime) gives
``P' = P + E`` with ``|E_tj| <= b_j``, the manifest's per-channel bound. Then, per head, with
``q_t = h_t W_q``, ``k_u = h_u W_k`` and the logit ``q_t . k_u / sqrt(d_head)``:

    q'_t . k'_u - q_t . k_u = (E_t W_q) . k_u + q_t . (E_u W_k) + (E_t W_q) . (E_u W_k)

and ``|(E_t W_q)_i| <= sum_j b_j |W_q[j, i]| =: beta_q,i`` (same for k), so the budget is

    |delta logit(t, u)| <= sum_i (beta_q,i |k_u,i| + |q_t,i| beta_k,i + beta_q,i beta_k,i)
                           / sqrt(d_head)

derived from the bound alone (no magic number). The layer's arithmetic runs in float64 so the only
difference between the two sides is the encoding; 1e-9 absorbs float64 rounding.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from edgepe.contract.config import ExportConfig, base_manifest
from edgepe.formats.onnx import output_shape
from edgepe.graphs.int8 import build_int8
from edgepe.schemes import build, resolve

L, D, HEADS = 512, 64, 4
D_HEAD = D // HEADS
FLOAT64_SLACK = 1e-9


def layer(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token embeddings ``x [L, D]`` ~ N(0, 1) and projections ``W_q, W_k [H, D, d_head]`` ~
    N(0, 1/D) (the usual fan-in scaling), seeded."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((L, D))
    w_q, w_k = (rng.standard_normal((HEADS, D, D_HEAD)) / np.sqrt(D) for _ in range(2))
    return x, w_q, w_k


def logits(h: np.ndarray, w_q: np.ndarray, w_k: np.ndarray):
    """``[H, L, L]`` attention logits and the per-head ``q``, ``k`` ``[H, L, d_head]``."""
    q, k = np.einsum("td,hde->hte", h, w_q), np.einsum("td,hde->hte", h, w_k)
    return np.einsum("hte,hue->htu", q, k) / np.sqrt(D_HEAD), q, k


def budget(b: np.ndarray, q: np.ndarray, k: np.ndarray, w_q, w_k) -> np.ndarray:
    """``[H, L, L]``: the bound on |delta logit| from the per-channel encoding bound ``b [D]``."""
    beta_q = np.einsum("d,hde->he", b, np.abs(w_q))[:, None, :]  # [H, 1, d_head]
    beta_k = np.einsum("d,hde->he", b, np.abs(w_k))[:, None, :]
    return (np.einsum("hxe,hue->hxu", beta_q, np.abs(k))
            + np.einsum("hte,hxe->htx", np.abs(q), beta_k)
            + (beta_q * beta_k).sum(-1)[:, :, None]) / np.sqrt(D_HEAD)


@pytest.mark.parametrize(("scheme", "mode"), [("binary", "compute"), ("sinusoidal", "table")])
def test_int8_attention_logits_within_budget(scheme, mode):
    cfg = resolve(scheme, L, D)
    config = ExportConfig(scheme=cfg, mode=mode, quantize="int8")
    module = build(cfg)
    manifest = base_manifest(config, output_shape(config), "float32")
    model = build_int8(config, module, manifest)
    positions = np.arange(L, dtype=np.int64)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    pe_int8 = session.run(None, {"positions": positions})[0].astype(np.float64)
    with torch.no_grad():
        pe = module.encode(torch.from_numpy(positions)).numpy().astype(np.float64)
    b = np.asarray(manifest["quant"]["bound_per_channel"])
    assert (np.abs(pe_int8 - pe) <= b).all()  # the premise of the budget

    x, w_q, w_k = layer()
    exact, q, k = logits(x + pe, w_q, w_k)
    approx = logits(x + pe_int8, w_q, w_k)[0]
    delta = np.abs(approx - exact)
    allowed = budget(b, q, k, w_q, w_k) + FLOAT64_SLACK
    assert (delta <= allowed).all(), float((delta - allowed).max())
    # The budget is an honest worst case: the measured error uses a real part of it, not 1e-9.
    assert delta.max() > 0.01 * allowed.max()
