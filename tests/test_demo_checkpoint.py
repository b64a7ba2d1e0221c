"""A checkpoint saved from the demo notebook's own module loads into ``binary`` and reproduces it.

``demo_notebook.py`` is the notebook's class, verbatim. Checkpoints are read with
``torch.load(weights_only=True)``: a mismatched one is a ``CheckpointError`` naming what was
expected and found, and a pickle that would run code is refused without running it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from demo_notebook import BinaryPositionalEncoding as DemoPE

from edgepe.contract.errors import CheckpointError
from edgepe.schemes import build, resolve

SEED_NOTEBOOK = Path(__file__).resolve().parents[2] / "shared/seeds/binary-pe-demo-notebook.txt"


def test_demo_module_is_the_notebooks_code_verbatim():
    if not SEED_NOTEBOOK.is_file():
        pytest.skip(f"the seed notebook is not beside the checkout ({SEED_NOTEBOOK})")
    assert inspect.getsource(DemoPE) in SEED_NOTEBOOK.read_text()


@pytest.fixture()
def demo_checkpoint(tmp_path, capsys):
    torch.manual_seed(1234)
    demo = DemoPE(64, max_seq_len=512)  # the notebook's defaults: dropout 0.1
    assert "Binary PE: 10 bits -> 64 dims" in capsys.readouterr().out  # the demo's own print
    path = tmp_path / "demo.pt"
    torch.save(demo.state_dict(), path)
    return demo.eval(), path


def test_demo_checkpoint_reproduces_the_demo_forward_exactly(demo_checkpoint):
    demo, path = demo_checkpoint
    ours = build(resolve("binary", 512, d_model=64), checkpoint=str(path))
    assert set(ours.state_dict()) == {"pe_binary", "projection.weight"} == set(demo.state_dict())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for shape in [(4, 50, 64), (1, 1, 64), (2, 512, 64), (3, 7, 64)]:
            x = torch.randn(shape, generator=gen)
            assert torch.equal(ours(x), demo(x)), shape
        rows = demo.projection(demo.pe_binary[0])  # the demo's PE rows, [512, 64]
        for length in (1, 50, 512):
            assert torch.equal(ours.encode(torch.arange(length)), rows[:length])
        # Any other set of rows is one float32 matmul of another shape, which BLAS may sum in
        # another order (the demo's own Linear on rows [5, 0, 511] differs from its table rows
        # by 1 ulp): the spec's tolerance, not bitwise.
        rtol, atol = ours.spec.tolerance
        picked = torch.tensor([5, 0, 511, 300])
        assert torch.allclose(ours.encode(picked), rows[picked], rtol=rtol, atol=atol)


def test_checkpoint_of_another_shape_is_refused_naming_both(tmp_path, capsys):
    path = tmp_path / "small.pt"
    torch.save(DemoPE(32, max_seq_len=512).state_dict(), path)
    with pytest.raises(CheckpointError) as err:
        build(resolve("binary", 512, d_model=64), checkpoint=str(path))
    message = str(err.value)
    assert "expected" in message and "found" in message
    assert "projection.weight [64, 10]" in message and "projection.weight [32, 10]" in message
    assert "\n" not in message


def test_checkpoint_for_another_max_len_is_refused(tmp_path, capsys):
    path = tmp_path / "short.pt"
    torch.save(DemoPE(64, max_seq_len=100).state_dict(), path)
    with pytest.raises(CheckpointError, match=r"pe_binary \[1, 512, 10\].*pe_binary \[1, 100, 7\]"):
        build(resolve("binary", 512, d_model=64), checkpoint=str(path))


class _Payload:
    """Unpickling this would write a marker file: what a hostile checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    state = {"pe_binary": torch.zeros(1, 512, 10), "projection.weight": torch.zeros(64, 10),
             "extra": _Payload(marker)}
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="safe loader"):
        build(resolve("binary", 512, d_model=64), checkpoint=str(path))
    assert not marker.exists()
    # The payload is live: the unrestricted unpickler runs it (which is why edgepe never uses it).
    torch.load(path, weights_only=False)
    assert marker.read_text() == "pwned"
