"""Training: gradients reach every learnable parameter, with the values calculus says.

The bits are computed from integer positions, so they are inputs, not parameters: no gradient is
asked of them and no straight-through estimator applies (guide 7.3's STE/smoothing note is about
learning through a hard threshold, which none of these schemes has). What trains is the
projection (binary), w and b (integer-learnable), the gate logits (binary-gated), the table
(learned) and the residual (sinusoidal-learned).
"""

from __future__ import annotations

import pytest
import torch

from edgepe.schemes import build, get_spec, resolve, scheme_ids

LEARNABLE = {
    "binary": {"projection.weight"},
    "integer-learnable": {"weight", "bias"},
    "binary-gated": {"gate_logits"},
    "learned": {"table"},
    "sinusoidal-learned": {"residual"},
    "t5-bias": {"relative_attention_bias.weight"},
}


@pytest.mark.parametrize("scheme_id", scheme_ids())
def test_parameters_are_exactly_the_learnable_ones(scheme_id):
    m = build(resolve(scheme_id, 16))
    names = {name for name, _ in m.named_parameters()}
    assert names == LEARNABLE.get(scheme_id, set())
    assert get_spec(scheme_id).learnable == (scheme_id in LEARNABLE)


def bits_of(positions: torch.Tensor, n: int) -> torch.Tensor:
    return torch.stack([(positions >> k) & 1 for k in range(n)], dim=-1).double()


POS = torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 99, 100, 127, -1, 300])


def test_binary_projection_gradient_is_the_bit_sum():
    m = build(resolve("binary", 100, d_model=6)).train()
    m.encode(POS).sum().backward()
    n = m.config.n_bits
    wrapped = POS % 2**n
    expected = bits_of(wrapped, n).sum(0).expand(6, n)  # d/dW_ok sum_p sum_o b_k(p) W_ok
    assert torch.equal(m.projection.weight.grad.double(), expected)


def test_binary_forward_trains_like_the_demo():
    m = build(resolve("binary", 512, d_model=8)).train()
    x = torch.zeros(2, 10, 8)
    m(x).pow(2).sum().backward()
    assert m.projection.weight.grad.abs().sum() > 0
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    before = m(x).pow(2).sum().item()
    opt.step()
    assert m(x).pow(2).sum().item() < before


def test_integer_learnable_gradients():
    m = build(resolve("integer-learnable", 100, d_model=5)).train()
    m.encode(POS).sum().backward()
    x = POS.double() / 99
    assert torch.allclose(m.weight.grad.double(), x.sum().expand(5), rtol=1e-6)
    assert torch.equal(m.bias.grad, torch.full((5,), float(POS.numel())))


def test_binary_gated_gradients_reach_the_gate_logits():
    m = build(resolve("binary-gated", 100)).train()
    with torch.no_grad():
        m.gate_logits.copy_(torch.linspace(-2, 2, m.gate_logits.numel()))
    m.encode(POS).sum().backward()
    n = m.config.n_bits
    g = torch.sigmoid(m.gate_logits.detach().double())
    x = (POS.double() / 99).unsqueeze(-1)
    expected = ((bits_of(POS % 2**n, n) - x) * g * (1 - g)).sum(0)  # d/dl of g b + (1 - g) x
    assert torch.allclose(m.gate_logits.grad.double(), expected, rtol=1e-5, atol=1e-6)
    assert m.gate_logits.grad.abs().min() > 0


def test_binary_gated_learns_to_open_its_gates_towards_the_bits():
    m = build(resolve("binary-gated", 64)).train()
    positions = torch.arange(64)
    target = bits_of(positions, m.config.n_bits).float()
    opt = torch.optim.SGD(m.parameters(), lr=2.0)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (m.encode(positions) - target).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert (torch.sigmoid(m.gate_logits) > 0.5).all()  # every gate moved from 1/2 to the bits


def test_learned_table_gradient_counts_clamped_rows():
    m = build(resolve("learned", 10, d_model=3)).train()
    m.encode(torch.tensor([0, 0, 3, 15, -2, 9])).sum().backward()
    counts = torch.zeros(10)
    counts[0], counts[3], counts[9] = 3, 1, 2  # -2 clamps to 0; 15 to the last row
    assert torch.equal(m.table.grad, counts.unsqueeze(-1).expand(10, 3))


def test_sinusoidal_learned_residual_gradient_only_inside_the_range():
    m = build(resolve("sinusoidal-learned", 10, d_model=4)).train()
    m.encode(torch.tensor([2, 2, 7])).sum().backward()
    counts = torch.zeros(10)
    counts[2], counts[7] = 2, 1
    assert torch.equal(m.residual.grad, counts.unsqueeze(-1).expand(10, 4))
    m.residual.grad = None
    # Outside the range the residual is off: no row (not even the clamped first/last) learns.
    m.encode(torch.tensor([-1, -5, 10, 11, 4000])).sum().backward()
    assert m.residual.grad is not None and torch.equal(m.residual.grad, torch.zeros(10, 4))


@pytest.mark.parametrize("scheme_id", sorted(LEARNABLE))
def test_trained_weights_round_trip_through_a_checkpoint(scheme_id, tmp_path):
    """What training changed is what a checkpoint carries back into ``build``."""
    cfg = resolve(scheme_id, 32)
    trained = build(cfg, seed=3)
    with torch.no_grad():
        for param in trained.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(9)))
    path = tmp_path / "trained.pt"
    torch.save(trained.state_dict(), path)
    loaded = build(cfg, seed=0, checkpoint=str(path))
    positions = torch.arange(-4, 40)
    keys = (positions,) if cfg.spec.kind == "bias" else ()  # t5-bias: every (t, u) of the grid
    with torch.no_grad():
        assert torch.equal(loaded.encode(positions, *keys), trained.encode(positions, *keys))
        assert not torch.equal(build(cfg, seed=0).encode(positions, *keys),
                               trained.encode(positions, *keys))
