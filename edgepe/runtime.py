"""The runtime: ``edgepe.load(path)`` opens an artifact and encodes positions with it.

``load`` reads the manifest at ``PATH + ".json"``, checks the file against its ``sha256`` and
returns a ``Runtime``:

- ONNX artifacts (compute or table graphs) run in one ``onnxruntime.InferenceSession``, made
  once and reused by every call;
- npy and bin tables (float, uint8, int8-quantised or bit-packed) are read with numpy and
  indexed as the table graphs index them: every position clamps to ``[0, max_len - 1]``; a
  bias table is indexed by the distance ``t - u``, clamped to the table
  (``edgepe.graphs.table_values``);
- ExecuTorch programs (``.pte``) run in ExecuTorch's runtime (the ``[executorch]`` extra);
- TFLite models (``.tflite``) run in LiteRT's interpreter (the ``[tflite]`` extra);
- C headers are refused: they are compiled into firmware, not loaded (see ``models/README.md``).

``encode(positions)`` returns what the artifact outputs (``[N, D]``, or ``[H, N, M]`` for bias
schemes given ``key_positions``) as a numpy array, in the artifact's dtype (float32 unless it was
exported with ``--dtype``; int8 tables come back dequantised). ``apply(x, offset)`` adds the
encoding to ``x [..., S, D]`` at positions ``offset .. offset + S - 1`` as the reference modules'
``forward`` does (rotates pairs for rope; adds the bias to ``scores [..., H, N, M]`` for bias
schemes), so a streaming decoder passes the number of tokens already seen as ``offset``.

Positions are checked before anything runs: integers only (never floats or bools), shape ``[N]``
(``[N, k]`` for multi-index schemes), ``|pos| <= positions.limit`` when the manifest sets one.
Inside that domain every position is defined by ``positions.out_of_range`` (wrap, clamp or
extrapolate), so nothing else is refused.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgepe.contract.commit import recover
from edgepe.contract.errors import (
    ArtifactError,
    BadParameterError,
    ParityError,
    PositionError,
    did_you_mean,
)
from edgepe.contract.manifest import artifact_for, open_regular
from edgepe.graphs.sessions import quiet_options
from edgepe.graphs.untrusted import check_untrusted
from edgepe.rebuild import check_claims, rebuild
from edgepe.rebuild import read_manifest as read

INT64_MAX = 2**63 - 1

# Short names people type, as polygraphy accepts them (STYLE 6); matched case-insensitively.
PROVIDER_ALIASES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "dml": "DmlExecutionProvider",
    "directml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
}


# float32 graphs run in float32. onnxruntime's CUDA provider computes MatMul and Gemm in TF32 on
# Ampere and later GPUs unless its ``use_tf32`` option is "0" (a 10-bit significand: measured on
# an H100 with onnxruntime-gpu 1.31.1, binary's projection off by up to 4.2e-4 against the
# float32 reference, 1e-6 tolerance). PyTorch keeps TF32 off for matmuls by default too.
PROVIDER_OPTIONS = {"CUDAExecutionProvider": {"use_tf32": "0"}}


def with_options(providers: Sequence[str]) -> list:
    """``providers`` as ``InferenceSession`` takes them, with edgepe's ``PROVIDER_OPTIONS``."""
    return [(p, PROVIDER_OPTIONS[p]) if p in PROVIDER_OPTIONS else p for p in providers]


def _short(provider: str) -> str:
    return re.sub(r"executionprovider$", "", provider.lower())


def resolve_providers(providers: str | Sequence[str] | None) -> list[str]:
    """onnxruntime provider names from forgiving ones: ``"cpu"``, ``"CUDA"``, ``"cuda,cpu"``.

    ``None`` means CPU only. A name onnxruntime does not know, or one this install lacks, is a
    ``BadParameterError`` that lists the available providers.
    """
    import onnxruntime as ort

    if providers is None:
        return ["CPUExecutionProvider"]
    if not isinstance(providers, (str, list, tuple)):
        raise BadParameterError(f"providers must be a str or a list of names, got "
                                f"{type(providers).__name__}")
    names = providers.split(",") if isinstance(providers, str) else list(providers)
    available = ort.get_available_providers()
    by_short = {_short(p): p for p in ort.get_all_providers()}
    by_short.update({alias: full for alias, full in PROVIDER_ALIASES.items()})
    have = ", ".join(_short(p) for p in available)
    resolved = []
    for raw in names:
        key = _short(str(raw).strip())
        full = by_short.get(key)
        if full is None:
            raise BadParameterError(
                f"Unknown provider {raw!r}.{did_you_mean(key, by_short)} Available here: {have}"
            )
        if full not in available:
            raise BadParameterError(
                f"provider {raw!r} ({full}) is not available in this onnxruntime; available "
                f"here: {have}" + (" (install onnxruntime-gpu for cuda)" if key == "cuda" else "")
            )
        if full not in resolved:
            resolved.append(full)
    if not resolved:
        raise BadParameterError(f"no provider given; available here: {have}")
    return resolved


# The formats that run on a runtime of their own, which onnxruntime's providers do not apply to.
_OWN_RUNTIME = {"pte": "an ExecuTorch program: it runs on ExecuTorch's runtime",
                "tflite": "a TFLite model: it runs on LiteRT's interpreter"}


def load(path: str | Path, providers: str | Sequence[str] | None = None,
         check: str = "sha256", checkpoint: str | Path | None = None) -> Runtime:
    """Open the artifact at ``path`` (any format but C) for ``encode``/``apply``.

    ``providers`` (ONNX only; tables run in numpy): onnxruntime providers in priority order,
    forgiving names (``"cpu"``, ``"cuda"``); default CPU. The artifact is untrusted input: raises
    ``ArtifactError`` for a file that is missing or not a regular file, has no valid manifest
    (``edgepe.contract.manifest.read``), does not match its sha256, holds ONNX external data,
    control flow or ops edgepe's builders never emit (``edgepe.graphs.untrusted.check_untrusted``),
    an output shape other than its manifest's, or an npy header other than the one edgepe writes.

    Every manifest field that changes the values it gives (an int8 ``quant.scale``, ``dtype``,
    ``bitorder``, a rope layout, the out-of-range policy...) must be what this edgepe derives
    from the manifest's recorded inputs (``edgepe.rebuild.check_claims``), else ``ArtifactError``;
    an int8 artifact exported from a checkpoint needs ``checkpoint`` for that.

    ``check="rebuild"`` also rebuilds the artifact from its manifest's inputs with this edgepe
    (``edgepe.rebuild``; ``checkpoint``: the file a checkpoint-based artifact came from) and
    raises ``ParityError`` unless it is byte-identical: the check ``edgepe verify`` starts with.
    """
    if check not in ("sha256", "rebuild"):
        raise BadParameterError(f"check must be 'sha256' or 'rebuild', got {check!r}")
    path = artifact_for(path)  # X.onnx.json names X.onnx
    recover(path)  # an export killed between its two renames: settle to a matching pair first
    manifest = read(path)
    fmt = manifest["format"]
    if fmt == "c":
        raise ArtifactError(
            f"{str(path)!r} is a C header: it is compiled into firmware, not loaded; #include it "
            "(models/README.md), or export --format npy or onnx to use the table from Python"
        )
    data = _read_checked(path, manifest) if fmt == "onnx" else None
    if data is None:
        _check_sha256(path, manifest)
    if check == "rebuild":
        rebuilt = rebuild(path, manifest, checkpoint)
        if not rebuilt.reproduced:
            raise ParityError(f"{str(path)!r} is not reproduced: {rebuilt}")
    if fmt == "onnx":
        runtime: Runtime = OnnxRuntime(path, manifest, providers, data)
    elif fmt in _OWN_RUNTIME:
        if providers is not None:
            raise BadParameterError(f"{str(path)!r} is {_OWN_RUNTIME[fmt]}, providers apply to "
                                    "ONNX artifacts")
        runtime = (PteRuntime if fmt == "pte" else TfliteRuntime)(path, manifest)
    else:
        if providers is not None:
            resolve_providers(providers)  # a misspelt name is still an error
        runtime = TableRuntime(path, manifest)
    if check != "rebuild":  # (a rebuild compared the whole manifest already)
        check_claims(path, manifest, checkpoint)
    return runtime


def read_artifact_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the artifact at ``path`` (``edgepe.rebuild.read_manifest``: its sidecar, a
    regular file, bounded, validated; or a lone graph's embedded copy, trusted only if it rebuilds
    the file), checked to describe that very file (its sha256)."""
    manifest = read(path)
    _check_sha256(path, manifest)
    return manifest


def _sha256_refusal(path: Path) -> ArtifactError:
    return ArtifactError(
        f"{str(path)!r} does not match its manifest (sha256 differs): it was changed or "
        "truncated after export; export it again"
    )


def _check_sha256(path: Path, manifest: Mapping[str, Any]) -> None:
    digest = hashlib.sha256()
    with open(open_regular(path, "artifact"), "rb", closefd=True) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != manifest["sha256"]:
        raise _sha256_refusal(path)


def _read_checked(path: Path, manifest: Mapping[str, Any]) -> bytes:
    """An ONNX artifact's bytes, matching its sha256, and its graph one edgepe could have
    written (``edgepe.graphs.untrusted.check_untrusted``). The session is made from these very
    bytes, so the file cannot change between the check and the load."""
    import onnx

    with open(open_regular(path, "artifact"), "rb", closefd=True) as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise _sha256_refusal(path)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # noqa: BLE001 - any parse failure: not an ONNX artifact
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"{str(path)!r} is not a readable ONNX model ({first})") from None
    check_untrusted(model, str(path))
    return data


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def check_positions(
    value: Any, arity: int | None, limit: int | None, what: str = "positions"
) -> np.ndarray:
    """``value`` as int64 ``[N]`` (``[N, arity]``), or a one-line ``PositionError``."""
    shape = "[N]" if arity is None else f"[N, {arity}]"
    if isinstance(value, str | bytes):
        raise PositionError(f"{what} must be an integer array {shape}, got the string {value!r}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise PositionError(f"{what} must be an integer array {shape}: {exc}") from None
    if array.dtype.kind not in "iu":
        raise PositionError(
            f"{what} must be integers (int64), got dtype {array.dtype}; floats and bools are "
            "refused because they do not name a position exactly"
        )
    if array.ndim != (1 if arity is None else 2) or (arity is not None and array.shape[1] != arity):
        raise PositionError(f"{what} must have shape {shape}, got {list(array.shape)}")
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        raise PositionError(f"{what} must fit in int64, got {int(array.max())}")
    array = array.astype(np.int64, copy=False)
    if limit is not None and array.size:
        # Compare without abs(): |int64 min| overflows.
        low, high = int(array.min()), int(array.max())
        if high > limit or low < -limit:
            worst = high if high > limit else low
            raise PositionError(
                f"{what} must be within +-{limit} for this artifact (its manifest's "
                f"positions.limit: float32 is exact only up to there), got {worst}"
            )
    return array


def _offset(offset: Any) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise PositionError(f"offset must be an integer, got {offset!r}")
    return int(offset)


def _float_input(x: Any, what: str, min_ndim: int) -> np.ndarray:
    if isinstance(x, str | bytes):
        raise BadParameterError(f"{what} must be a float array, got a string")
    try:
        array = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise BadParameterError(f"{what} must be a float array: {exc}") from None
    if array.dtype.kind != "f":
        raise BadParameterError(f"{what} must be a float array, got dtype {array.dtype}")
    if array.ndim < min_ndim:
        raise BadParameterError(
            f"{what} must have at least {min_ndim} dimensions, got shape {list(array.shape)}"
        )
    return array


class Runtime:
    """An artifact ready to encode positions. Made by ``edgepe.load``; see the module docstring.

    Subclasses implement ``_encode(positions, key_positions)`` on checked int64 arrays.
    """

    rotates = False  # True for rope's apply graph, which rotates x itself

    def __init__(self, path: Path, manifest: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self._manifest = dict(manifest)
        domain = manifest["positions"] or {}
        self._arity = domain.get("arity")
        self._limit = domain.get("limit")

    def _rope_layout(self) -> tuple[str, int]:
        return _rope_convention(self._manifest, self.width)

    def _apply_rows(self, x: np.ndarray, positions: Any) -> np.ndarray:
        """rope at per-row ``positions [B, S]``: the apply-4d graph, or ``encode`` rotated here."""
        if x.shape[-1] != self.width:
            raise BadParameterError(f"x has D (last axis) = {x.shape[-1]}, but this artifact's "
                                    f"is {self.width}; x shape {list(x.shape)}")
        flat = check_positions(np.asarray(positions).reshape(-1), None, self._limit)
        rows = flat.reshape(np.shape(positions))
        _rows_shape(x, rows)
        if self.rotates:
            return self._rotate_rows(x, rows)
        pe = self._encode(flat, None).reshape(*rows.shape, -1)  # [B, S, d]
        if x.ndim == 4:
            pe = pe[:, None]
        return rotate(x, pe, *self._rope_layout())

    def _rotate_rows(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError  # only ONNX apply graphs rotate x themselves

    @property
    def manifest(self) -> dict[str, Any]:
        """The artifact's manifest (a copy)."""
        return dict(self._manifest)

    @property
    def scheme(self) -> str:
        return self._manifest["scheme"]

    @property
    def kind(self) -> str:
        """``pe``, ``rope`` or ``bias`` (see ``edgepe.schemes.SchemeSpec``)."""
        return self._manifest["kind"]

    @property
    def shape(self) -> tuple:
        """The artifact's shape from its manifest (a table's ``[rows, cols]``, or a graph's)."""
        return tuple(self._manifest["shape"])

    @property
    def arity(self) -> int | None:
        """``k`` when positions are ``[N, k]``, else ``None``."""
        return self._arity

    @property
    def width(self) -> int:
        """``D`` of ``encode``'s ``[N, D]``, or ``H`` of a bias ``[H, N, M]``."""
        m = self._manifest
        return m["heads"] if self.kind == "bias" else m["d_model"]

    def __repr__(self) -> str:
        m = self._manifest
        size = f"heads={m.get('heads')}" if self.kind == "bias" else f"d_model={m.get('d_model')}"
        return (
            f"<edgepe {type(self).__name__} {self.scheme} {m['mode']} {m['format']} "
            f"max_len={m['max_len']} {size} dtype={m['dtype']} path={str(self.path)!r}>"
        )

    def encode(self, positions: Any, key_positions: Any = None) -> np.ndarray:
        """Encodings of ``positions`` (int64 ``[N]`` or ``[N, k]``): ``[N, D]``.

        Bias schemes take ``key_positions`` (int64 ``[M]``) too and return ``[H, N, M]``.
        """
        positions = check_positions(positions, self._arity, self._limit)
        if self.kind == "bias":
            if key_positions is None:
                raise PositionError(
                    f"scheme '{self.scheme}' is a bias: encode(positions, key_positions) needs "
                    "key_positions [M] too"
                )
            key_positions = check_positions(key_positions, None, self._limit, "key_positions")
        elif key_positions is not None:
            raise PositionError(
                f"scheme '{self.scheme}' takes no key_positions (only bias schemes do)"
            )
        return self._encode(positions, key_positions)

    def _encode(self, positions: np.ndarray, key_positions: np.ndarray | None) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - every subclass implements it

    def apply(self, x: Any, offset: int = 0, positions: Any = None) -> np.ndarray:
        """``x`` with the encoding applied at positions ``offset .. offset + S - 1``.

        - ``pe``: ``x [..., S, D] + encode(positions)`` (cast to ``x``'s dtype), as the demo's
          forward adds it;
        - ``rope``: ``x [..., S, d]`` rotated in the manifest's ``params.layout`` (pairs
          ``(2i, 2i + 1)``, or ``(i, i + R/2)`` of the first ``rotary_dim`` dimensions);
        - ``bias``: ``x`` are attention scores ``[..., H, N, M]``: queries at
          ``offset .. offset + N - 1``, keys at ``0 .. M - 1``.

        ``positions`` (``[S]`` or ``[S, k]``) replaces ``offset``; multi-index schemes need it.
        rope also takes per-row ``positions [B, S]`` for ``x [B, S, d]`` or ``[B, H, S, d]``.
        """
        what = "scores" if self.kind == "bias" else "x"
        x = _float_input(x, what, 3 if self.kind == "bias" else 2)
        if self.kind == "rope" and positions is not None and np.ndim(positions) == 2:
            return self._apply_rows(x, positions)
        if x.shape[-3 if self.kind == "bias" else -1] != self.width:
            axis = "H (axis -3)" if self.kind == "bias" else "D (last axis)"
            raise BadParameterError(
                f"{what} has {axis} = {x.shape[-3 if self.kind == 'bias' else -1]}, but this "
                f"artifact's is {self.width}; {what} shape {list(x.shape)}"
            )
        steps = x.shape[-2]
        if positions is None:
            if self._arity is not None:
                raise PositionError(
                    f"scheme '{self.scheme}' takes positions [S, {self._arity}]: pass "
                    "apply(x, positions=...) instead of an offset"
                )
            start = _offset(offset)
            if start < -INT64_MAX - 1 or start + steps - 1 > INT64_MAX:
                raise PositionError(
                    f"offset {start} + {steps} steps leaves int64 (positions are int64)"
                )
            positions = np.arange(start, start + steps, dtype=np.int64)
        positions = check_positions(positions, self._arity, self._limit)
        if len(positions) != steps:
            raise PositionError(
                f"positions has {len(positions)} rows but {what} has {steps} steps (axis -2)"
            )
        if self.kind == "bias":
            keys = np.arange(x.shape[-1], dtype=np.int64)
            return x + self._encode(positions, keys).astype(x.dtype, copy=False)
        if self.kind == "rope" and self.rotates:
            return self._rotate(x, positions)
        pe = self._encode(positions, None)
        if self.kind == "rope":
            return rotate(x, pe, *self._rope_layout())
        return x + pe.astype(x.dtype, copy=False)


def _rows_shape(x: np.ndarray, positions: np.ndarray) -> None:
    """Refuse per-row ``positions [B, S]`` that do not match ``x [B, S, d]`` / ``[B, H, S, d]``."""
    if x.ndim not in (3, 4) or positions.shape != (x.shape[0], x.shape[-2]):
        raise PositionError(
            f"per-row positions [B, S] need x [B, S, d] or [B, H, S, d] with the same B and S; "
            f"got positions {list(positions.shape)} and x {list(x.shape)}"
        )


def _rope_convention(manifest: Mapping[str, Any], width: int) -> tuple[str, int]:
    """``(layout, rotary_dim)`` from a rope manifest's params, checked (an untrusted file)."""
    params = manifest.get("params") if isinstance(manifest.get("params"), dict) else {}
    layout = params.get("layout", "interleaved")
    r = params.get("rotary_dim") or width
    if layout not in ("interleaved", "half") or not (_is_int(r, 2) and r <= width and r % 2 == 0):
        raise ArtifactError(
            f"rope manifest: params.layout must be interleaved or half and params.rotary_dim an "
            f"even width up to {width} (0: all); got {layout!r}, {params.get('rotary_dim')!r}"
        )
    return layout, r


def rotate(x: np.ndarray, pe: np.ndarray, layout: str = "interleaved",
           rotary_dim: int | None = None) -> np.ndarray:
    """RoPE: rotate ``x [..., S, d]`` by ``pe = [cos | sin]`` in the manifest's ``layout``:
    pairs ``(x_{2i}, x_{2i+1})`` (interleaved), or ``(x_i, x_{i+R/2})`` of the first
    ``rotary_dim = R`` dimensions with the rest copied (half).

    The same op order as ``edgepe.schemes.rope.rotate`` (products, then one subtraction or
    addition, each rounded in ``x``'s dtype), so float32 results match it bitwise.
    """
    cos, sin = np.split(pe.astype(x.dtype, copy=False), 2, axis=-1)
    out = np.empty_like(x)
    if layout == "half":
        r = rotary_dim or x.shape[-1]
        half = r // 2
        cos, sin = cos[..., :half], sin[..., :half]
        first, second = x[..., :half], x[..., half:r]
        out[..., :half] = first * cos - second * sin
        out[..., half:r] = first * sin + second * cos
        out[..., r:] = x[..., r:]
        return out
    even, odd = x[..., 0::2], x[..., 1::2]
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


class OnnxRuntime(Runtime):
    """An ONNX artifact in one onnxruntime session, created here and reused by every call."""

    def __init__(self, path: Path, manifest: Mapping[str, Any], providers=None,
                 data: bytes | None = None) -> None:
        super().__init__(path, manifest)
        import onnxruntime as ort

        # onnxruntime's own log off: a failure is edgepe's one error line (issue 41)
        options = quiet_options()
        try:
            self.session = ort.InferenceSession(
                str(path) if data is None else data, sess_options=options,
                providers=with_options(resolve_providers(providers)),
            )
        except BadParameterError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ArtifactError(f"{str(path)!r} does not load in onnxruntime: {first}") from None
        self._inputs = [i.name for i in self.session.get_inputs()]
        self._output = self.session.get_outputs()[0].name
        # rope's apply graph (export --rope-graph apply) rotates x itself: x, positions -> y;
        # apply-4d takes x [B, H, S, d] and per-row positions [B, S].
        self.rotates = self.kind == "rope" and self._inputs == ["x", "positions"]
        self._per_row = self.rotates and len(self.session.get_inputs()[1].shape) == 2
        expected = ["positions", "key_positions"] if self.kind == "bias" else ["positions"]
        if self._inputs != expected and not self.rotates:
            raise ArtifactError(
                f"{str(path)!r} has inputs {self._inputs}; a '{self.kind}' artifact has {expected}"
            )
        output = self.session.get_outputs()[0].shape
        stated = manifest["shape"]
        if not self.rotates and (len(output) != len(stated) or any(
                isinstance(a, int) != isinstance(b, int) or (isinstance(a, int) and a != b)
                for a, b in zip(output, stated, strict=False))):
            raise ArtifactError(f"{str(path)!r} outputs shape {output}, but its manifest says "
                                f"{stated}: refused")
        graph_shape = next(i.shape for i in self.session.get_inputs() if i.name == "positions")
        want = ["N"] if self._arity is None else ["N", self._arity]
        if self._per_row:
            graph_shape, want = ["B", "S"], ["B", "S"]
        if len(graph_shape) != len(want) or (
            self._arity is not None and isinstance(graph_shape[1], int)
            and graph_shape[1] != self._arity
        ):
            raise ArtifactError(
                f"{str(path)!r} takes positions of shape {graph_shape}, but its manifest's "
                f"positions.arity {self._arity} says {want}"
            )

    @property
    def providers(self) -> list[str]:
        """The providers the session runs on, in priority order."""
        return self.session.get_providers()

    def _encode(self, positions, key_positions):
        if self.rotates:
            raise BadParameterError(
                f"{str(self.path)!r} is rope's apply graph (x, positions -> y): use apply(x, "
                "offset); encode needs the encode graph (export without --rope-graph apply)"
            )
        feeds = {"positions": positions}
        if key_positions is not None:
            feeds["key_positions"] = key_positions
        out = self._run(feeds)
        want = ((self.width, len(positions), len(key_positions)) if key_positions is not None
                else (len(positions), self.width))
        if out.shape != want:
            raise ArtifactError(f"{str(self.path)!r} returned shape {list(out.shape)} for "
                                f"{len(positions)} positions; its manifest says {list(want)}")
        return out

    def _rotate_rows(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """An apply graph at per-row ``positions [B, S]`` (``x [B, S, d]`` gets a heads axis)."""
        if not self._per_row:
            raise BadParameterError(
                f"{str(self.path)!r} is an apply graph for positions [S]; per-row positions "
                "[B, S] need --rope-graph apply-4d (or the encode graph)"
            )
        x4 = (x[:, None] if x.ndim == 3 else x).astype(np.float32, copy=False)
        y = self._run({"x": x4, "positions": rows})
        return y.reshape(x.shape)

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The session's output; a graph that fails inside onnxruntime is an ``ArtifactError``
        (one line, exit 2), not onnxruntime's own exception."""
        try:
            return self.session.run([self._output], feeds)[0]
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ArtifactError(f"{str(self.path)!r} failed inside onnxruntime: "
                                f"{first}") from None

    def _rotate(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The apply graph on ``x [..., S, d]``: leading axes folded into its batch axis."""
        if self._per_row:  # apply-4d: x [..., S, d] as [1, H', S, d], positions [1, S]
            x4 = x.reshape(1, -1, *x.shape[-2:]).astype(np.float32, copy=False)
            y = self.session.run([self._output], {"x": x4, "positions": positions[None]})[0]
            return y.reshape(x.shape)
        batch = x.reshape(-1, *x.shape[-2:]).astype(np.float32, copy=False)
        y = self._run({"x": batch, "positions": positions})
        if y.size != x.size:
            raise ArtifactError(f"{str(self.path)!r} returned shape {list(y.shape)} for x of "
                                f"shape {list(batch.shape)}")
        return y.reshape(x.shape)


class PteRuntime(Runtime):
    """An ExecuTorch program (``--format pte``) in ExecuTorch's runtime, loaded once from the
    bytes whose sha256 was checked (``edgepe.formats.pte.Program``)."""

    def __init__(self, path: Path, manifest: Mapping[str, Any]) -> None:
        super().__init__(path, manifest)
        from edgepe.formats.pte import Program

        # The program is made from these very bytes, checked against the sha256 again: the
        # file cannot change between the check and the load.
        with open(open_regular(path, "artifact"), "rb", closefd=True) as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            raise _sha256_refusal(path)
        self.program = Program(data, dict(manifest))

    def _encode(self, positions, key_positions):
        feeds = {"positions": positions}
        if key_positions is not None:
            feeds["key_positions"] = key_positions
        return self.program.run(feeds)


class TfliteRuntime(PteRuntime):
    """A TFLite model (``--format tflite``) in LiteRT's interpreter, loaded once from the bytes
    whose sha256 was checked (``edgepe.formats.tflite.Program``; TFLM is the verifier's)."""

    def __init__(self, path: Path, manifest: Mapping[str, Any]) -> None:
        Runtime.__init__(self, path, manifest)
        from edgepe.formats.tflite import Program, read_file

        data = read_file(path)
        if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            raise _sha256_refusal(path)
        self.program = Program(data, dict(manifest), "litert")


class TableRuntime(Runtime):
    """A stored table (npy or bin), indexed in numpy the way table graphs index it.

    Layout (``edgepe.graphs.table_values``): ``pe``/``rope`` rows are positions; ``binary-2d`` and
    ``hierarchical`` rows hold the bits of one coordinate, placed per column here; bias rows are
    distances ``t - u = row - (max_len - 1)``. Positions clamp to ``[0, max_len - 1]``; bias
    tables clamp the distance instead (``table_values.bias_rows``).
    """

    def __init__(self, path: Path, manifest: Mapping[str, Any]) -> None:
        super().__init__(path, manifest)
        self.table = read_table(path, manifest)
        self._quant = manifest.get("quant")
        self._hi = int(manifest["max_len"]) - 1
        rows, cols = self.table.shape
        want_rows = 2 * self._hi + 1 if self.kind == "bias" else self._hi + 1
        want_cols = self.width if self._arity is None else cols
        if (rows, cols) != (want_rows, want_cols):
            raise ArtifactError(
                f"{str(path)!r} holds a [{rows}, {cols}] table; a '{self.kind}' table of "
                f"max_len {self._hi + 1} and width {self.width} is [{want_rows}, {want_cols}]"
            )
        if self._quant:
            self._scale = np.asarray(self._quant["scale"], dtype=np.float32)
            self._zero = np.asarray(self._quant.get("zero_point", 0))
            for name, value in (("scale", self._scale), ("zero_point", self._zero)):
                if value.ndim > 1 or value.size not in (1, cols) or value.dtype.kind not in "iuf":
                    raise ArtifactError(
                        f"{str(path)!r}: quant.{name} must be one number or one a column "
                        f"({cols}), got {self._quant.get(name)!r}"
                    )
            if self._zero.dtype.kind == "f":
                raise ArtifactError(f"{str(path)!r}: quant.zero_point must be an integer")
        if self._arity is not None:
            from edgepe.formats.bin import index_columns  # loads torch (the scheme registry)

            self._columns = index_columns(manifest, cols)

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """Table rows at ``index`` (any shape), dequantised when the table is int8."""
        rows = np.asarray(self.table[index])
        return rows if not self._quant else dequantize(rows, self._scale, self._zero)

    def _encode(self, positions, key_positions):
        if self.kind == "bias":
            from edgepe.graphs.table_values import bias_rows

            rows = bias_rows(positions, key_positions, self._hi + 1)  # [N, M] row numbers
            return np.ascontiguousarray(np.moveaxis(self._rows(rows), -1, 0))  # [H, N, M]
        positions = np.clip(positions, 0, self._hi)
        if self._arity is None:
            return self._rows(positions)
        axis, bit, valid = self._columns
        rows = self._rows(positions[:, axis])  # [N, d, W]: each column's coordinate row
        picked = np.take_along_axis(rows, bit[None, :, None], axis=2)[..., 0]
        return picked * np.asarray(valid, dtype=picked.dtype)


def read_table(path: Path, manifest: Mapping[str, Any]) -> np.ndarray:
    """The table ``[rows, cols]`` of an npy or bin artifact (memory-mapped unless bit-packed).

    The manifest's ``numpy_dtype`` (explicit byte order) says what the file holds; a bit-packed
    table (``dtype`` ``bit``) is unpacked to 0/1 ``uint8``. The bytes are read by the format's
    reader (``edgepe.formats.npy`` / ``edgepe.formats.bin``).
    """
    shape = tuple(manifest["shape"])
    if len(shape) != 2 or not all(_is_int(n, 1) for n in shape):
        raise ArtifactError(
            f"{str(path)!r}: a table's manifest shape is [rows, cols], got {list(shape)}"
        )
    try:
        stored = np.dtype(manifest.get("numpy_dtype") or manifest["dtype"])
    except TypeError:
        stored = np.dtype(object)
    if stored.kind not in "fiu":
        raise ArtifactError(
            f"{str(path)!r}: the manifest's numpy_dtype/dtype names no numeric type: "
            f"{manifest.get('numpy_dtype') or manifest['dtype']!r}"
        )
    from edgepe.formats import bin, npy

    reader = npy if manifest["format"] == "npy" else bin
    try:
        data = reader.read(path, manifest, stored, shape)
    except (OSError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ArtifactError(
            f"{str(path)!r} is not a readable {manifest['format']} table: {first}"
        ) from None
    if tuple(data.shape) != shape or data.dtype != stored:
        raise ArtifactError(
            f"{str(path)!r} holds {data.dtype} {list(data.shape)} but its manifest says "
            f"{stored} {list(shape)}"
        )
    return data


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """float32 ``(q - zero_point) * scale``, per column along ``axis`` 1 (as DequantizeLinear)."""
    return (q.astype(np.int32) - zero_point.astype(np.int32)).astype(np.float32) * scale
