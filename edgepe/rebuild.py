"""Exports are deterministic, so an artifact is checked by building it again (issue 23).

``config_from_manifest(manifest, checkpoint)`` turns a manifest's recorded ``inputs`` back into the
``ExportConfig`` that made it; ``rebuild(path, manifest, checkpoint)`` builds that artifact in
memory with the running edgepe and compares it with the file, streaming: the file must equal the
rebuilt bytes and the manifest the rebuilt manifest, except ``checkpoint.path`` (where the
checkpoint lay at export; never opened here). The result says where the first difference is: a
manifest field, an ONNX graph's input/output/initializer/node, or a byte offset.

A checkpoint-based artifact needs the checkpoint itself (``checkpoint``, a path the user gave): its
sha256 must equal the recorded one. Without it ``CheckpointError`` (exit 2) names the sha256
needed. No path from the manifest is opened; no error depends on a file's content.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgepe.contract.checkpoint import sha256_file
from edgepe.contract.config import (
    DEFAULT_OPSET,
    DEFAULT_TABLE_CAP,
    LOWERED_MODES,
    ExportConfig,
    validate_choices,
)
from edgepe.contract.errors import ArtifactError, CheckpointError
from edgepe.contract.manifest import dumps as _dumps
from edgepe.contract.manifest import (
    open_regular,
    path_arg,
    path_for,
    read,
    read_embedded,
    validate,
)
from edgepe.contract.version import __version__
from edgepe.export import prepare
from edgepe.export.compare import _comparable, _CompareWriter, compare, first_difference

# Recorded inputs -> ExportConfig fields (the scheme's own are resolved separately); a null is
# the default the exporter records as null (lowering of a table, c_prefix of an ONNX graph...).
_OPTIONS = {"mode": None, "format": None, "dtype": None, "quantize": None,
            "quant_granularity": "channel", "lowering": "bitwise", "seed": None,
            "opset": DEFAULT_OPSET, "c_prefix": "edgepe", "c_align": 16, "int8_runtime": "fold"}
# Recorded only when given (so manifests made without them keep their bytes): optional.
_OPTIONAL = ("checkpoint_key", "checkpoint_param")
_SCHEME_KEYS = ("scheme", "max_len", "d_model", "heads", "params")
# A rebuild may ask the table builders for 4x the artifact's size plus this: an int8 table's
# float32 staging is 4x its bytes; headers, graph structure and C text only add to a file.
_SLACK_BYTES = 1 << 16


@dataclass
class Rebuilt:
    """The outcome of a rebuild: ``reproduced`` (bytes and manifest equal), or ``difference``
    saying where they first differ; ``manifest`` is the rebuilt one (its tolerances and int8
    bounds are the registry's and the quantiser's, not the file's). ``same_version`` is False
    when another edgepe version wrote the artifact: then nothing was compared."""

    reproduced: bool
    difference: str | None
    manifest: dict[str, Any] | None
    same_version: bool = True
    config: Any = None  # the ExportConfig rebuilt from the inputs
    module: Any = None  # its reference module (the verifier's reference)
    note: str = ""  # why it was not reproduced although nothing was found wrong
    # another version's manifest claims this edgepe does not derive (accepted: --accept-foreign)
    unchecked: tuple[str, ...] = ()
    bytes_match: bool = False  # the file's bytes are the rebuild's (only the manifest may differ)

    @property
    def ok(self) -> bool:
        """Reproduced, or from another version with nothing found wrong (numeric check only)."""
        return self.difference is None

    def __str__(self) -> str:
        if self.reproduced:
            return "rebuilt byte-identical"
        if not self.same_version and self.ok:
            return f"not reproduced ({self.note})"
        return f"rebuild FAILED: {self.difference}"


def check_checkpoint(recorded_sha: str | None, checkpoint: str | Path | None) -> None:
    """Refuse ``checkpoint`` (a file the user gave) unless it is the one an artifact records by
    ``recorded_sha`` (``None``: exported without one, so none may be given). The messages name
    only the recorded sha256 and the user's path: nothing depends on another file's content."""
    if checkpoint is not None and recorded_sha is None:
        raise CheckpointError("this artifact was not exported from a checkpoint: drop "
                              "--checkpoint")
    if recorded_sha is None:
        return
    if checkpoint is None:
        raise CheckpointError(
            f"this artifact was exported from a checkpoint with sha256 {recorded_sha}: "
            "pass it with --checkpoint FILE (no path from a manifest is opened)"
        )
    if not path_arg(checkpoint, "checkpoint").is_file():
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} does not exist or is not a file")
    if sha256_file(checkpoint) != recorded_sha:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} is not the one this artifact "
                              f"was exported from (sha256 {recorded_sha})")


def config_from_manifest(manifest: dict[str, Any], checkpoint: str | Path | None,
                         max_table_bytes: int):
    """``(ExportConfig, module)`` that the manifest's ``inputs`` record; ``checkpoint`` is the
    user's file for a checkpoint-based artifact (checked against the recorded sha256)."""
    from edgepe.schemes import build, resolve

    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict):
        raise ArtifactError("the manifest records no inputs: the artifact cannot be rebuilt")
    missing = [k for k in (*_SCHEME_KEYS, *(k for k, v in _OPTIONS.items() if v is None))
               if k not in inputs]
    if missing:
        raise ArtifactError(f"the manifest's inputs lack {', '.join(missing)}: the artifact "
                            "cannot be rebuilt")
    options = {k: default if inputs.get(k) is None else inputs[k]
               for k, default in _OPTIONS.items()}
    for key in ("seed", "opset", "c_align"):
        if isinstance(options[key], bool) or not isinstance(options[key], int):
            raise ArtifactError(f"the manifest's inputs.{key} must be an integer, got "
                                f"{options[key]!r}")
    extra = {k: v for k, v in inputs.items()
             if k not in (*_SCHEME_KEYS, *_OPTIONS, *_OPTIONAL, "checkpoint_sha256")}
    key = inputs.get("checkpoint_key")
    if key is not None and not isinstance(key, str):
        raise ArtifactError(f"the manifest's inputs.checkpoint_key must be a string, got {key!r}")
    param = inputs.get("checkpoint_param")
    if param is not None and not isinstance(param, str):
        raise ArtifactError(f"the manifest's inputs.checkpoint_param must be a string, got "
                            f"{param!r}")
    recorded_sha = inputs.get("checkpoint_sha256")
    recorded = manifest.get("checkpoint") or {}
    check_checkpoint(recorded_sha, checkpoint)
    try:
        scheme = resolve(inputs["scheme"], inputs["max_len"], d_model=inputs["d_model"],
                         heads=inputs["heads"], params=inputs["params"] or {})
    except (TypeError, ValueError, OverflowError) as exc:  # a param of the wrong JSON type
        raise ArtifactError(f"the manifest's inputs.params cannot be resolved for scheme "
                            f"{inputs['scheme']!r}: {_first_line(exc)}") from None
    config = ExportConfig(
        scheme=scheme, extra=extra, max_table_bytes=max_table_bytes,
        # The recorded path string goes back into the bytes it is part of; it is never opened.
        checkpoint=recorded.get("path") if recorded_sha is not None else None,
        checkpoint_sha256=recorded_sha, checkpoint_key=key, checkpoint_param=param,
        **{k: v for k, v in options.items()},
    )
    validate_choices(config)
    module = build(scheme, seed=config.seed,
                   checkpoint=None if checkpoint is None else str(checkpoint), checkpoint_key=key,
                   checkpoint_param=param)
    return config, module


def rebuild(path: str | Path, manifest: dict[str, Any],
            checkpoint: str | Path | None = None, accept_foreign: bool = False) -> Rebuilt:
    """Rebuild the artifact at ``path`` from ``manifest`` and compare (see the module doc).

    ``manifest`` must be validated (``edgepe.contract.manifest.read``). Inputs the running edgepe
    cannot build (an unknown scheme, a table bigger than the file allows) raise an ``EdgepeError``
    (exit 2); a difference does not raise.

    An artifact another edgepe version wrote (a foreign build) is not compared byte for byte;
    every claim of its manifest (every field but ``edgepe_version``, ``sha256`` and
    ``checkpoint.path``: quant scale, zero point and bounds, ``positions.out_of_range`` and
    limit, dtype, layout, shape, tolerance...) must equal what this edgepe derives from the
    recorded inputs (``foreign_claims``), else the rebuild FAILS naming the first one;
    ``accept_foreign`` accepts them instead and lists each in ``unchecked`` (the numeric check
    then still uses this edgepe's values, never the file's).
    """
    from edgepe.schemes import get_spec

    path = Path(path)
    get_spec(manifest["scheme"])  # an unknown scheme is bad input (exit 2), named as such
    fd = open_regular(path, "artifact")
    with open(fd, "rb", closefd=True) as f:
        config, module = config_from_manifest(manifest, checkpoint, _cap(manifest, _size(f)))
        prepared = prepare(config, module)
        foreign = manifest.get("edgepe_version") != __version__
        # Foreign means foreign (issue 41): whatever version a manifest names, its bytes are
        # compared with this edgepe's rebuild; only the version label itself is not a claim.
        label = {**manifest, "edgepe_version": __version__} if foreign else manifest
        difference, rebuilt = compare(f, path, label, prepared, ignore_paths=True)
    same_bytes = difference is None or difference.startswith("the manifest differs")
    if foreign and difference is not None:
        return _foreign(manifest, prepared, config, module, difference, same_bytes,
                        accept_foreign)
    if foreign:
        return Rebuilt(True, None, rebuilt, False, config, module, bytes_match=True,
                       note=f"labelled edgepe {manifest.get('edgepe_version')!r}, rebuilt "
                            f"byte-identical by {__version__}")
    return Rebuilt(difference is None, difference, rebuilt, True, config, module,
                   bytes_match=same_bytes)


def _foreign(manifest: dict[str, Any], prepared, config, module, difference: str,
             same_bytes: bool, accept_foreign: bool) -> Rebuilt:
    """A foreign build that is not byte-identical to this edgepe's rebuild: FAILS naming the
    first difference, unless ``accept_foreign``; then every claim this edgepe cannot check is
    listed in ``unchecked`` (its bytes first) and the numeric check uses this edgepe's values,
    never the file's (a looser tolerance or bound still FAILS)."""
    version = manifest.get("edgepe_version")
    ours = json.loads(_dumps(prepared.manifest))
    if not accept_foreign:
        return Rebuilt(False, f"written by edgepe {version!r} (this is {__version__}) and not "
                       f"byte-identical to this edgepe's rebuild: {difference}; pass "
                       "--accept-foreign to verify it numerically with this edgepe's values",
                       ours, False, config, module, bytes_match=same_bytes)
    claims = ([] if same_bytes else [f"the bytes: {difference}"]) + foreign_claims(manifest, ours)
    note = (f"written by edgepe {version!r}, this is {__version__}: verified numerically only; "
            f"{len(claims)} claim(s) accepted unchecked: " + "; ".join(claims))
    return Rebuilt(False, looser(manifest, ours), ours, False, config, module, note=note,
                   unchecked=tuple(claims), bytes_match=same_bytes)


# The fields a foreign build may state differently without it being a claim about its values.
_NOT_CLAIMS = ("edgepe_version", "sha256")


def foreign_claims(manifest: dict[str, Any], rebuilt: dict[str, Any]) -> list[str]:
    """Each manifest field of a foreign build that differs from what this edgepe derives from
    the same recorded inputs (``rebuilt``), as ``"FIELD: the file claims X, this edgepe derives
    Y"``: a claim the verifier cannot reproduce (bounded to the first 16)."""
    theirs = {k: v for k, v in _comparable(manifest).items() if k not in _NOT_CLAIMS}
    ours = {k: v for k, v in _comparable(rebuilt).items() if k not in _NOT_CLAIMS}
    claims: list[str] = []
    for key in sorted(set(theirs) | set(ours)):
        if len(claims) >= 16:
            break
        found = first_difference({key: theirs[key]} if key in theirs else {},
                                 {key: ours[key]} if key in ours else {})
        if found is not None:
            claims.append(found.replace(" != rebuilt ", " != this edgepe's "))
    return claims


def check_claims(path: str | Path, manifest: dict[str, Any],
                 checkpoint: str | Path | None = None) -> None:
    """``edgepe.load``'s check of what its manifest says beyond the recorded inputs (issue 30):
    every field that changes the values it gives (int8 ``quant.scale``/``zero_point``/``axis``,
    ``dtype``, ``bitorder``, rope ``layout``, ``positions.out_of_range``/``limit``, shape...) must
    equal what this edgepe derives from the inputs (``foreign_claims``; the bytes are not built
    or compared: that is ``check="rebuild"``). Raises ``ArtifactError`` naming the first field
    that differs. A checkpoint-based artifact needs ``checkpoint`` when it is int8 (its scales
    come from the weights: ``CheckpointError``); a float one without it is not checked, nor a
    float ONNX or ExecuTorch graph of a pe or bias scheme (its bytes alone give its values;
    a rope graph's layout and an int8 graph's scale are manifest fields load uses)."""
    inputs = manifest.get("inputs") if isinstance(manifest.get("inputs"), dict) else {}
    if inputs.get("checkpoint_sha256") is not None and checkpoint is None \
            and manifest.get("quant") is None:
        return
    if manifest["format"] in ("onnx", "pte", "tflite") and manifest.get("quant") is None \
            and manifest["kind"] != "rope":
        return  # a float graph's values come from its bytes alone (the sha256 covers them)
    size = os.stat(path).st_size
    config, module = config_from_manifest(manifest, checkpoint, _cap(manifest, size))
    ours = json.loads(_dumps(prepare(config, module).manifest))
    claims = foreign_claims(manifest, ours)
    if claims:
        raise ArtifactError(f"{str(path)!r}: its manifest says what its recorded inputs do not "
                            f"give ({claims[0]}): it was edited after export; export it again")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


def looser(manifest: dict[str, Any], rebuilt: dict[str, Any]) -> str | None:
    """Where ``manifest`` states a looser tolerance or int8 bound than the rebuilt one."""
    for section, key in (("tolerance", "rtol"), ("tolerance", "atol"), ("quant", "bound"),
                         ("quant", "bound_all_positions")):
        theirs = (manifest.get(section) or {}).get(key)
        ours = (rebuilt.get(section) or {}).get(key)
        if theirs is not None and (ours is None or theirs > ours):
            return (f"the manifest states {section}.{key} {theirs}, looser than this edgepe's "
                    f"{ours}")
    return None


def just_built(path: str | Path, manifest: dict[str, Any],
               checkpoint: str | Path | None = None) -> Rebuilt:
    """The ``Rebuilt`` of an artifact this process has just written from these very inputs
    (``edgepe export``'s quick check): its bytes ARE the build, so building them a second time
    to compare is skipped; the reference module is built as for a rebuild."""
    size = Path(path).stat().st_size
    config, module = config_from_manifest(manifest, checkpoint, _cap(manifest, size))
    return Rebuilt(True, None, manifest, True, config, module, bytes_match=True)


def _cap(manifest: dict[str, Any], size: int) -> int:
    """The ``max_table_bytes`` of a rebuild: a stored table is at most 4x the file (plus
    ``_SLACK_BYTES``), so a manifest claiming a bigger one is refused before it is built; a
    compute graph stores none, but its int8 error is measured over the whole float32 table,
    bounded by the export's default cap (``--max-table-bytes`` is not an input: it changes no
    byte)."""
    stored = 4 * size + _SLACK_BYTES
    return stored if manifest["mode"] == "table" else max(stored, DEFAULT_TABLE_CAP)


def _size(f) -> int:

    return os.fstat(f.fileno()).st_size


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of the artifact at ``path``: its sidecar (``edgepe.contract.manifest.read``),
    or for an ONNX artifact moved alone, the copy its graph embeds, trusted only because it rebuilds
    the file byte for byte: the embedded copy records no rebuild ``inputs``, so they are taken
    from its own fields, the artifact is built again from them, and the manifest returned is the
    rebuilt one (``manifest_source: "embedded"``). Anything else is refused in one line."""
    path = Path(path)
    os.close(open_regular(path, "artifact"))
    if os.path.lexists(path_for(path)):
        return read(path)
    found = read_embedded(path)
    if found is None:
        return read(path)  # raises: no sidecar, nothing embedded
    embedded, opset = found
    lone = f"{str(path)!r} has no manifest beside it ({str(path_for(path))!r})"
    if not isinstance(embedded, dict) or not isinstance(embedded.get("scheme"), str):
        raise ArtifactError(f"{lone} and its embedded manifest names no scheme")
    if embedded.get("checkpoint") is not None:
        raise ArtifactError(f"{lone}; it was exported from a checkpoint, which its embedded "
                            "manifest cannot rebuild it from: keep its .json with it")
    get_spec_checked(embedded["scheme"])
    inputs = _embedded_inputs(embedded, opset)
    fd = open_regular(path, "artifact")
    with open(fd, "rb", closefd=True) as f:
        size = _size(f)
        try:
            config, module = config_from_manifest({**embedded, "inputs": inputs}, None,
                                                  _cap(embedded, size))
        except (ArtifactError, TypeError, KeyError, ValueError) as exc:
            raise ArtifactError(f"{lone}, and its embedded manifest does not say how to rebuild "
                                f"it ({exc}): keep its .json with it") from None
        prepared = prepare(config, module)
        sink = _CompareWriter(f)
        prepared.write(sink)
        offset = sink.finish()
    if offset is not None:
        raise ArtifactError(f"{lone}, and the artifact its embedded manifest describes differs "
                            f"from it at byte {offset}: not trusted; keep its .json with it")
    manifest = json.loads(_dumps({**prepared.manifest, "sha256": sink.hexdigest()}))
    manifest["manifest_source"] = "embedded"
    validate(manifest, f"{path}'s rebuilt manifest")
    return manifest


def get_spec_checked(scheme: str) -> None:
    from edgepe.schemes import get_spec

    get_spec(scheme)  # an unknown scheme is bad input (exit 2), named as such


def _embedded_inputs(m: dict[str, Any], opset: int | None) -> dict[str, Any]:
    """The rebuild ``inputs`` an export records, taken back from the fields of the manifest a
    graph embeds (``ExportConfig.inputs``); what they miss shows when the rebuild differs."""
    quant = m.get("quant") if isinstance(m.get("quant"), dict) else None
    inputs = {
        "scheme": m.get("scheme"), "max_len": m.get("max_len"), "d_model": m.get("d_model"),
        "heads": m.get("heads"), "params": m.get("params"),
        "mode": m.get("mode"), "format": m.get("format"), "dtype": m.get("dtype"),
        "quantize": "int8" if quant else "none",
        "quant_granularity": quant.get("granularity") if quant else None,
        "lowering": m.get("lowering") if m.get("mode") in LOWERED_MODES else None,
        "seed": m.get("seed"), "checkpoint_sha256": None, "opset": opset,
        "c_prefix": None, "c_align": None,
    }
    if quant:
        inputs["int8_runtime"] = quant.get("runtime")
    return inputs
