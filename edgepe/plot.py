"""Pictures of an encoding, headless (matplotlib's object API, Agg; no pyplot, no display).

Kinds (``KINDS``):

- ``heatmap``: the demo notebook's figure. Left, the raw bits of each position (LSB, bit 0, at
  the bottom; ``cmap="binary"``); right, the scheme's encoding (``cmap="RdYlBu"``) with a colour
  bar. Bias schemes show head 0's ``bias[t, u]``; multi-index schemes use position ``(p, p, ..)``.
- ``similarity``: ``PE(t) . PE(u)`` for every pair of plotted positions.
- ``hamming``: how many bits change between neighbours ``p`` and ``p + 1``: plain binary (up to
  ``n``, at every carry) against Gray code (always 1, guide 3.6), and the scheme's own encoding
  when its entries are 0/1.
- ``quant-error``: an int8 artifact against its float32 reference: the largest ``|error|`` per
  dimension next to the proven bound from the manifest's ``quant``, and the error of every entry.

With ``--artifact`` the first three draw what an artifact computes (through ``edgepe.load``:
a table's clamping, a graph's wrapping) instead of the reference module.

Files are deterministic: the PNG carries no ``Software`` text chunk, the SVG no date and a fixed
``svg.hashsalt`` for its ids, so the same command writes the same bytes.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.config import check_output, write_output
from edgepe.contract.errors import ArtifactError, BadParameterError
from edgepe.rebuild import check_checkpoint

KINDS = ("heatmap", "similarity", "hamming", "quant-error")
FORMATS = {".png": "png", ".svg": "svg"}
MAX_POSITIONS = 4096  # a similarity matrix of 4096^2 is 16M cells: already more than a screen
# The widest encoding a plot draws (one image column per dimension, or head): 4096 positions x
# 4096 dimensions peak at 1.5 GB (heatmap and similarity, measured); d_model 65536 took 19 GB
# (issue 41), more columns than a screen has pixels anyway.
MAX_WIDTH = 4096
# A bias plot's values computed at once ([heads, query rows, S], head 0 kept): 2^24 float32
# values are 64 MiB (1024 heads at 4096 positions were 64 GiB in one call).
BIAS_VALUES = 1 << 24
DEFAULT_POSITIONS = 256
DPI = 100
METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}


def default_positions(max_len: int) -> np.ndarray:
    """Positions ``0 .. min(max_len, 256) - 1``: the plotted span when none is given."""
    return np.arange(min(max_len, DEFAULT_POSITIONS), dtype=np.int64)


def check_span(positions: np.ndarray) -> np.ndarray:
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    if not 2 <= positions.size <= MAX_POSITIONS:
        raise BadParameterError(
            f"a plot shows 2 to {MAX_POSITIONS} positions, got {positions.size}"
        )
    return positions


def check_width(config) -> None:
    """Refuse an encoding wider than ``MAX_WIDTH`` (d_model) before anything is built or
    encoded. (A bias scheme draws head 0's ``[S, S]``: its width is the positions', bounded by
    ``check_span``; its heads are computed in blocks, ``BIAS_VALUES``.)"""
    if config.spec.kind != "bias" and config.d_model is not None and config.d_model > MAX_WIDTH:
        raise BadParameterError(f"a plot draws at most {MAX_WIDTH} columns (one per dimension), "
                                f"got d_model {config.d_model}: export a table and plot a slice "
                                "of it")


def _encode(source, config, positions: np.ndarray) -> np.ndarray:
    """The encoding ``[S, D]`` (bias: head 0's ``[S, S]``) as float64.

    ``source`` is the reference module, or an artifact's runtime (``edgepe.load``) to draw what
    the artifact computes. Multi-index schemes are drawn at ``(p, p, ..)``.
    """
    from edgepe.runtime import Runtime

    rows = positions if config.arity is None else np.repeat(positions[:, None], config.arity, 1)
    if config.spec.kind == "bias":
        # Every head is computed, head 0 kept: query rows in blocks of at most BIAS_VALUES
        # values ([H, rows, S]), as 1024 heads at 4096 positions are 64 GiB at once.
        step = max(1, BIAS_VALUES // (config.heads * len(positions)))
        return np.concatenate([_bias_head0(source, positions[i:i + step], positions)
                               for i in range(0, len(positions), step)], axis=0)
    if isinstance(source, Runtime):
        return source.encode(rows).astype(np.float64)
    import torch

    with torch.no_grad():
        return source.encode(torch.as_tensor(rows)).double().numpy()


def _bias_head0(source, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Head 0's ``[len(queries), len(keys)]`` bias as float64."""
    from edgepe.runtime import Runtime

    if isinstance(source, Runtime):
        return source.encode(queries, keys)[0].astype(np.float64)
    import torch

    with torch.no_grad():
        return source.encode(torch.as_tensor(queries), torch.as_tensor(keys))[0].double().numpy()


def _bits(positions: np.ndarray, n: int) -> np.ndarray:
    """``[S, n]`` bits of ``positions mod 2^n``, LSB first (as ``edgepe.schemes.bits``)."""
    return ((positions[:, None] >> np.arange(n)) & 1).astype(np.float64)


def _where(config, positions: np.ndarray) -> str:
    span = f"positions {positions[0]}..{positions[-1]}" if np.all(
        np.diff(positions) == 1) else f"{positions.size} positions"
    if config.arity is not None:
        span += f" (each as ({', '.join(['p'] * config.arity)}))"
    return span


def heatmap(config, source, positions: np.ndarray):
    """The demo's figure: raw bits (left) and the encoding (right), positions along x."""
    from matplotlib.figure import Figure

    positions = check_span(positions)
    fig = Figure(figsize=(16, 4), dpi=DPI)
    left, right = fig.subplots(1, 2)
    extent_x = (positions[0] - 0.5, positions[-1] + 0.5)
    raw = _bits(positions, config.n_bits)
    left.imshow(raw.T, aspect="auto", cmap="binary", origin="lower", interpolation="nearest",
                extent=(*extent_x, -0.5, raw.shape[1] - 0.5))
    left.set_xlabel("Position")
    left.set_ylabel("Bit index (LSB = 0)")
    left.set_title(f"Binary patterns (raw bits, n = {config.n_bits})")
    from matplotlib.patches import Patch

    left.legend(handles=[Patch(facecolor="black", edgecolor="gray", label="bit 1"),
                         Patch(facecolor="white", edgecolor="gray", label="bit 0")],
                loc="upper left", fontsize="small", framealpha=0.9)
    values = _encode(source, config, positions)
    if config.spec.kind == "bias":
        image = right.imshow(values, aspect="auto", cmap="RdYlBu", origin="lower",
                             interpolation="nearest", extent=(*extent_x, *extent_x))
        right.set_xlabel("Key position u")
        right.set_ylabel("Query position t")
        right.set_title(f"{config.scheme}: bias[head 0, t, u]")
    else:
        image = right.imshow(values.T, aspect="auto", cmap="RdYlBu", origin="lower",
                             interpolation="nearest",
                             extent=(*extent_x, -0.5, values.shape[1] - 0.5))
        right.set_xlabel("Position")
        right.set_ylabel("Dimension")
        what = "[cos | sin]" if config.spec.kind == "rope" else "encoding"
        right.set_title(f"{config.scheme} {what} (d_model = {config.d_model})")
    label = "bias value" if config.spec.kind == "bias" else "encoding value"
    fig.colorbar(image, ax=right, label=label)
    fig.suptitle(f"{config.scheme}, max_len {config.max_len}: {_where(config, positions)}")
    return fig


def similarity(config, source, positions: np.ndarray):
    """``PE(t) . PE(u)`` over the plotted positions."""
    from matplotlib.figure import Figure

    if config.spec.kind == "bias":
        raise BadParameterError(
            f"--kind similarity compares encodings; '{config.scheme}' is a bias with none: "
            "use --kind heatmap"
        )
    positions = check_span(positions)
    values = _encode(source, config, positions)
    gram = values @ values.T
    fig = Figure(figsize=(7, 6), dpi=DPI)
    ax = fig.subplots()
    extent = (positions[0] - 0.5, positions[-1] + 0.5) * 2
    image = ax.imshow(gram, cmap="viridis", origin="lower", interpolation="nearest",
                      extent=extent)
    fig.colorbar(image, ax=ax, label="PE(t) . PE(u) (dot product)")
    ax.set_xlabel("Position u")
    ax.set_ylabel("Position t")
    ax.set_title(f"{config.scheme}: PE(t) . PE(u)\n{_where(config, positions)}")
    return fig


def hamming(config, source, positions: np.ndarray):
    """Bits that change from ``p`` to ``p + 1``: binary against Gray (and the scheme's own)."""
    from matplotlib.figure import Figure

    positions = check_span(positions)
    n = config.n_bits
    after = positions + 1

    def gray(p):  # wrap first, as the gray scheme does: 2^n - 1 -> 2^n (= 0) is one bit too
        w = p & ((1 << n) - 1)
        return _bits(w ^ (w >> 1), n)

    curves = [("binary (raw bits)", _bits(positions, n), _bits(after, n)),
              ("Gray code", gray(positions), gray(after))]
    if config.spec.kind != "bias" and config.scheme not in ("binary-bits", "gray"):
        own, own_after = _encode(source, config, positions), _encode(source, config, after)
        if np.isin(own, (0.0, 1.0)).all() and np.isin(own_after, (0.0, 1.0)).all():
            curves.append((config.scheme, own, own_after))
    fig = Figure(figsize=(10, 4), dpi=DPI)
    ax = fig.subplots()
    # Gray's line (1 everywhere) lies on binary's wherever binary changes one bit: it is drawn
    # on top, thick and dashed with markers, binary under it thin and solid, so both show.
    styles = ({"linestyle": "-", "linewidth": 1.0, "color": "tab:blue", "zorder": 2},
              {"linestyle": "--", "linewidth": 2.5, "color": "tab:orange", "zorder": 3,
               "marker": "o", "markersize": 3},
              {"linestyle": ":", "linewidth": 1.5, "color": "tab:green", "zorder": 4})
    for (label, here, there), style in zip(curves, styles, strict=False):
        distance = np.abs(there - here).sum(axis=1)
        ax.step(positions, distance, where="mid", **style,
                label=f"{label}: mean {distance.mean():.2f}, max {distance.max():.0f}")
    ax.set_xlabel("Position p")
    ax.set_ylabel("Hamming distance to p + 1")
    ax.set_ylim(0, n + 0.5)
    ax.legend(loc="upper left")
    ax.set_title(f"Neighbours: bits changed from p to p + 1 (n = {n}, max_len {config.max_len})")
    return fig


def quant_error(runtime, config, module):
    """An int8 artifact's error against its float32 reference, per dimension and per entry."""
    import torch
    from matplotlib.figure import Figure

    quant = runtime.manifest.get("quant")
    if not quant:
        raise BadParameterError(
            f"{str(runtime.path)!r} is not quantised (its manifest's quant is null): export "
            "it with --quantize int8"
        )
    bias = config.spec.kind == "bias"
    count = min(config.max_len, 1024 if bias else 65536)
    positions = np.arange(count, dtype=np.int64)
    p = torch.as_tensor(positions)
    with torch.no_grad():
        if bias:
            got = runtime.encode(positions, positions).astype(np.float64)
            want = module.encode(p, p).double().numpy()
            err = np.abs(got - want).reshape(got.shape[0], -1).T  # [N * M, H]
        else:
            if config.arity is not None:
                p = p.unsqueeze(1).expand(-1, config.arity).contiguous()
                positions = p.numpy()
            got = runtime.encode(positions).astype(np.float64)
            err = np.abs(got - module.encode(p).double().numpy())  # [N, D]
    per_dim = err.max(axis=0)
    fig = Figure(figsize=(14, 4), dpi=DPI)
    left, right = fig.subplots(1, 2)
    dims = np.arange(per_dim.size)
    left.bar(dims, per_dim, width=0.8, color="tab:blue", label="measured max |error|")
    per_channel = quant.get("bound_per_channel")
    if per_channel and len(per_channel) == per_dim.size:
        left.stairs(per_channel, np.arange(per_dim.size + 1) - 0.5, color="tab:red",
                    label="proven bound", baseline=None)
    else:
        left.axhline(quant["bound"], color="tab:red", label="proven bound")
    left.set_ylim(0, 1.3 * max(quant["bound"], per_dim.max()))
    left.set_xlabel("Head" if bias else "Dimension")
    left.set_ylabel("max |int8 - float32|")
    left.legend(loc="upper right")
    left.set_title(
        f"measured {per_dim.max():.3g} <= bound {quant['bound']:.3g} "
        f"({quant.get('granularity', 'per ' + str(quant.get('axis')))} scales)"
    )
    image = right.imshow(err.T, aspect="auto", cmap="magma", origin="lower",
                         interpolation="nearest")
    fig.colorbar(image, ax=right)
    right.set_xlabel("query x key pair" if bias else "Position")
    right.set_ylabel("Head" if bias else "Dimension")
    right.set_title("|error| of every entry")
    m = runtime.manifest
    fig.suptitle(f"{m['scheme']} {m['mode']} {m['format']} int8, max_len {m['max_len']}: "
                 f"{count} positions")
    return fig


def render(fig, fmt: str) -> bytes:
    """The figure's bytes in ``fmt`` (png or svg), reproducibly."""
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "edgepe", "svg.fonttype": "path"}):
        fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches="tight", metadata=METADATA[fmt])
    return buffer.getvalue()


def image_format(out: Path) -> str:
    fmt = FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        raise BadParameterError(f"--out {str(out)!r}: the file name must end in .png or .svg")
    return fmt


def plot(
    kind: str,
    out: str | Path,
    config=None,
    *,
    artifact: str | Path | None = None,
    positions: Any = None,
    seed: int = 0,
    checkpoint: str | None = None,
    checkpoint_key: str | None = None,
    force: bool = False,
) -> Path:
    """Draw ``kind`` for the scheme ``config`` (a ``SchemeConfig``) and write ``out`` (.png/.svg).

    With ``artifact`` the scheme comes from its manifest and the pictures show what the artifact
    computes (``edgepe.load``); ``quant-error`` needs an int8 artifact.

    The file is written atomically; bad input raises before anything is written. ``out`` follows
    the one output rule (``edgepe.contract.config.write_output``): never the artifact, its
    manifest or the checkpoint, an existing file (or symlink, replaced, never followed) only with
    ``force``.
    """
    _matplotlib_config()
    out = Path(out)
    fmt = image_format(out)
    if kind not in KINDS:
        raise BadParameterError(f"--kind {kind!r} is not one of: {', '.join(KINDS)}")
    inputs = [Path(p) for p in (artifact, checkpoint) if p is not None]
    check_output(out, inputs, force)
    from edgepe.schemes import build

    runtime = None
    if artifact is not None:
        from edgepe.runtime import load

        runtime = load(artifact, checkpoint=checkpoint)
        config, seed, needed = config_of(runtime.manifest)
        if kind == "quant-error":  # the float32 reference needs the checkpoint, by its sha256

            check_checkpoint(needed, checkpoint)
        elif checkpoint is not None:
            raise BadParameterError("--artifact draws what the artifact computes: --checkpoint "
                                    "is only for --kind quant-error's float32 reference")
    elif kind == "quant-error":
        raise BadParameterError("--kind quant-error draws an artifact: give --artifact PATH")
    elif config is None:
        raise BadParameterError(f"--kind {kind} draws a scheme: give --scheme and --max-len")
    check_width(config)
    if kind == "quant-error":
        fig = quant_error(runtime, config, build(config, seed=seed, checkpoint=checkpoint))
    else:
        span = default_positions(config.max_len) if positions is None else positions
        source = runtime if runtime is not None else build(
            config, seed=seed, checkpoint=checkpoint, checkpoint_key=checkpoint_key)
        fig = {"heatmap": heatmap, "similarity": similarity, "hamming": hamming}[kind](
            config, source, span
        )
        if runtime is not None:
            m = runtime.manifest
            fig.text(0.99, 0.0, f"computed by {Path(artifact).name} ({m['mode']} "
                     f"{m['format']}, {m['dtype']}) in edgepe.load", fontsize=8, ha="right",
                     va="top")
    data = render(fig, fmt)
    write_output(out, data, inputs, force)
    return out


def _matplotlib_config() -> None:
    """Point matplotlib at a private folder when its default one (``$XDG_CONFIG_HOME`` or
    ``~/.config``, then ``/matplotlib``) cannot be written, e.g. a read-only HOME: otherwise it
    prints two warnings about a temporary cache on every run. ``MPLCONFIGDIR`` set by the user
    wins."""
    import os
    import tempfile

    if "MPLCONFIGDIR" in os.environ:
        return
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    default = os.path.join(base, "matplotlib")
    try:
        os.makedirs(default, exist_ok=True)
        if os.access(default, os.W_OK):
            return
    except OSError:
        pass
    private = os.path.join(tempfile.gettempdir(), f"edgepe-matplotlib-{os.getuid()}")
    try:
        os.makedirs(private, mode=0o700, exist_ok=True)
        info = os.lstat(private)
    except OSError:
        return  # matplotlib falls back (and says so); nothing better to offer
    if os.path.isdir(private) and not os.path.islink(private) and info.st_uid == os.getuid():
        os.environ["MPLCONFIGDIR"] = private


def config_of(manifest: dict) -> tuple[Any, int, str | None]:
    """``(SchemeConfig, seed, checkpoint sha256 or None)`` that made an artifact (its manifest).
    The checkpoint's recorded path is never opened (issue 23): ``--checkpoint`` gives the file."""
    from edgepe.schemes import resolve

    config = resolve(manifest["scheme"], manifest["max_len"], d_model=manifest.get("d_model"),
                     heads=manifest.get("heads"), params=manifest.get("params") or {})

    seed, checkpoint = manifest.get("seed") or 0, manifest.get("checkpoint") or {}
    if isinstance(seed, bool) or not isinstance(seed, int) or not isinstance(checkpoint, dict):
        raise ArtifactError(
            f"the manifest's seed {seed!r} or checkpoint {checkpoint!r} does not name weights"
        )
    return config, seed, checkpoint.get("sha256")
