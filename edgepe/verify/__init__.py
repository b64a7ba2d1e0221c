"""The verifier: an artifact rebuilt, then checked against its PyTorch reference on each runtime.

``verify_artifact(path)`` reads the manifest (``edgepe.contract.manifest.read``: untrusted,
bounded), checks that the file is the format it claims (else ``ArtifactError``, exit 2), then
REBUILDS the artifact from the manifest's recorded inputs with the running edgepe
(``edgepe.rebuild``): exports are deterministic, so the file must be byte-identical to the
rebuild and its manifest equal to the rebuilt one. A difference fails the report and says where;
the parity still runs, bounded to the quick sweep, to show what the difference does, but a C
header is then never compiled. An
artifact written by another edgepe version (a foreign build) is not compared byte for byte:
every claim of its manifest (quant scale, zero point and bounds, out-of-range policy and limit,
dtype, layout, shape, tolerance) must equal what this edgepe derives from the recorded inputs, else
it FAILS naming the claim (``accept_foreign``, ``--accept-foreign``: accepted, and the report lists
each claim it could not check); it is then verified numerically only ("not reproduced"), with
this edgepe's reference, tolerance, int8 scale and out-of-range policy, never the file's. A graph
or C header whose bytes are not the rebuild is never run nor compiled: the report says why.

The numeric check runs the artifact over every position ``0 .. max_len - 1``, single-position
calls and an extrapolation probe on each runtime, against the scheme module's ``encode`` (never
the table builder that wrote the file), with the tolerance of the registry and the bound of the
quantiser's proof as the rebuild states them (never the file's manifest). Bad input raises an
``EdgepeError``; a failed comparison does not raise: the report is falsy.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgepe import rebuild as rb
from edgepe.contract.checkpoint import sha256_file
from edgepe.contract.commit import recover
from edgepe.contract.config import check_output
from edgepe.contract.errors import BadParameterError, EdgepeError
from edgepe.contract.manifest import artifact_for, path_arg
from edgepe.contract.progress import reporting, track
from edgepe.graphs.sliced import CUDA_GRID_YZ_LIMIT
from edgepe.rebuild import read_manifest as read
from edgepe.verify.compare import CompareResult, Comparison, Tolerance

__all__ = ["CompareResult", "Report", "Tolerance", "verify_artifact"]



@dataclass
class Report:
    """The outcome of one verification: truthy iff the rebuild matched (or, for another
    version's artifact, found nothing looser), the sha256 matched and every runtime passed."""

    artifact: str
    manifest: dict[str, Any]
    sha256_expected: str
    sha256_actual: str
    results: list[CompareResult] = field(default_factory=list)
    quick: bool = False
    rebuild: Any = None  # edgepe.rebuild.Rebuilt
    # --mode sliced: checked against the float64 definition; the float32 recipe's own distance
    # from it over the swept positions, reported beside (edgepe.schemes.definition)
    reference_distance: float | None = None

    @property
    def rebuild_ok(self) -> bool:
        return self.rebuild is not None and self.rebuild.ok

    @property
    def sha256_ok(self) -> bool:
        return self.sha256_expected == self.sha256_actual

    @property
    def passed(self) -> bool:
        """A PASS: the rebuild reproduced the file byte for byte and every runtime passed. A
        numeric check alone never makes one (issue 41: a sweep cannot visit every position)."""
        return (self.rebuild is not None and self.rebuild.reproduced and self.rebuild_ok
                and self._numeric_ok)

    @property
    def accepted(self) -> bool:
        """A foreign build verified numerically only, as ``--accept-foreign`` asked: every
        runtime passed over the sweep, nothing looser was claimed; not a PASS (the report lists
        what was left unchecked). ``edgepe verify`` exits 0 for it."""
        return (self.rebuild is not None and not self.rebuild.reproduced and self.rebuild_ok
                and self._numeric_ok)

    @property
    def _numeric_ok(self) -> bool:
        return self.sha256_ok and bool(self.results) and all(self.results)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        parts = [] if self.rebuild is None else [str(self.rebuild)]
        if not self.sha256_ok:
            parts.append(
                f"sha256 {self.sha256_actual[:12]} != manifest {self.sha256_expected[:12]}"
            )
        for r in self.results:
            if r.passed:
                parts.append(f"{r.runtime} ok (max abs {r.max_abs_err:.3g})")
            elif r.error or r.placement_error:
                parts.append(f"{r.runtime} FAILED: {r.error or r.placement_error}")
            else:
                first = f", first at {r.first_mismatches[0].where}" if r.first_mismatches else ""
                parts.append(f"{r.runtime} FAILED: {r.mismatches} of {r.elements} elements "
                             f"beyond {r.tolerance}{first}")
        if self.reference_distance is not None:
            parts.append(f"against the float64 definition; the float32 reference is "
                         f"{self.reference_distance:.3g} from it")
        verdict = ("PASSED" if self.passed else
                   "ACCEPTED, NOT PROVEN (--accept-foreign)" if self.accepted else "FAILED")
        return f"parity {verdict} for {self.artifact}: " + "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The contract's JSON report (``passed``, ``results``) plus what identifies the run."""
        m = self.manifest
        return {
            "passed": self.passed,
            **({"accepted": True} if self.accepted else {}),
            "artifact": self.artifact,
            "scheme": m.get("scheme"),
            "mode": m.get("mode"),
            "format": m.get("format"),
            "dtype": m.get("dtype"),
            "max_len": m.get("max_len"),
            "quick": self.quick,
            "rebuild": None if self.rebuild is None else {
                "reproduced": self.rebuild.reproduced, "passed": self.rebuild.ok,
                "same_version": self.rebuild.same_version,
                "difference": self.rebuild.difference, "note": self.rebuild.note or None,
                "unchecked_claims": list(self.rebuild.unchecked)},
            "sha256": {"expected": self.sha256_expected, "actual": self.sha256_actual,
                       "passed": self.sha256_ok},
            "results": [r.as_dict() for r in self.results],
            **({"reference_distance": self.reference_distance}
               if self.reference_distance is not None else {}),
        }


def tolerance_for(manifest: dict[str, Any], probe: bool = False) -> Tolerance:
    """The tolerance a verification uses: the manifest's (0 for exact schemes); for int8
    artifacts the manifest's proven ``quant.bound`` (it already covers the float roundings of
    dequantising), or for the extrapolation probe ``quant.bound_all_positions`` where the bound
    over ``0 .. max_len - 1`` does not hold for every position; float16 outputs add one float16
    step where the float32 tolerance is not zero (rounding both sides to float16 can split
    values within the float32 tolerance by one step)."""
    tol = manifest.get("tolerance") or {}
    rtol, atol = float(tol.get("rtol") or 0.0), float(tol.get("atol") or 0.0)
    quant = manifest.get("quant")
    if quant and quant.get("bound") is not None:
        if probe and quant.get("bound_all_positions") is not None:
            return Tolerance(0.0, float(quant["bound_all_positions"]),
                             source="quant.bound_all_positions")
        return Tolerance(0.0, float(quant["bound"]), source="quant.bound")
    ulps = 1 if manifest.get("dtype") == "float16" and (rtol or atol) else 0
    return Tolerance(rtol, atol, ulps, source="manifest")


# Positions over which a quick check measures the float32 reference's distance from the float64
# definition (a sliced artifact's report); a full one measures every position below max_len.
QUICK_DISTANCE = 4096

# The int8 tensor of a graph whose OUTPUT is quantised (edgepe.graphs.int8, construction 3).
QUANTISED_OUTPUTS = ("pe_int8", "bias_int8", "y_int8")


def _as_stored(expected: np.ndarray, manifest: dict[str, Any]) -> np.ndarray:
    """The reference as the artifact documents its output: float16 outputs round it; a graph
    whose output is quantised saturates where ``QuantizeLinear`` does, at the int8 type's range
    ``[-128, 127]`` steps of each channel's static scale (ONNX QuantizeLinear: "saturate to
    [-128, 127] for int8"; in range the values stay within ``qmax = 127`` steps, so clipping
    changes nothing there)."""
    quant = manifest.get("quant")
    if manifest.get("dtype") == "float16" and not quant:
        with np.errstate(over="ignore"):  # past 65504 both sides are inf: they compare equal
            return expected.astype(np.float16)
    if quant and quant.get("tensor") in QUANTISED_OUTPUTS and quant.get("scale") is not None:
        scale = np.asarray(quant["scale"], dtype=np.float64)
        if scale.ndim == 1:
            shape = [1] * expected.ndim
            shape[int(quant.get("axis") or 0)] = -1
            scale = scale.reshape(shape)
        scale = scale.astype(np.float32)  # the steps as DequantizeLinear computes them
        return np.clip(expected, np.float32(-128) * scale, np.float32(127) * scale)
    return expected


def _wrong_dtype(actual, expected: np.ndarray, ours: dict[str, Any]) -> str | None:
    """Why a runtime's output is not stored as the rebuilt manifest says (a float16 graph or
    table where this edgepe builds float32), or ``None``. Float outputs must have the reference's
    float width; integer and bit outputs compare by value."""
    actual = np.asarray(actual)
    floats = (np.float16, np.float32, np.float64)
    if expected.dtype in (np.float16, np.float32) and actual.dtype in floats \
            and actual.dtype != expected.dtype and ours.get("dtype") in ("float32", "float16"):
        return (f"outputs {actual.dtype}, but this edgepe builds {ours['dtype']} from the "
                "recorded inputs")
    return None


def _check_file(path: Path, manifest: dict[str, Any]) -> tuple[tuple[str, ...], set[str]]:
    """Refuse a file that is not what its manifest says (truncated, not ONNX, wrong table).

    Returns a graph's input names and the non-standard op domains it uses (empty for others).
    """
    fmt = manifest["format"]
    if fmt == "onnx":
        from edgepe.formats.onnx import check_file

        return check_file(path, manifest)
    if fmt == "pte":
        from edgepe.formats.pte import check_file

        return check_file(path, manifest)
    if fmt == "tflite":
        from edgepe.formats.tflite import check_file

        return check_file(path, manifest)
    if fmt == "npy":
        from edgepe.formats.npy import check_file
    elif fmt == "bin":
        from edgepe.formats.bin import check_file
    else:
        from edgepe.formats.c import check_file
    check_file(path, manifest)
    return ("positions",), set()


def verify_artifact(
    path,
    providers=None,
    quick: bool = False,
    json_path=None,
    progress: bool | None = None,
    strict_placement: bool = False,
    checkpoint=None,
    rebuild: bool = True,
    accept_foreign: bool = False,
    force: bool = False,
) -> Report:
    """Verify the artifact at ``path``: rebuild, then parity; see the module docstring.

    ``providers``: runtime names (``cpu``, ``cuda``, ``ref``, ``c``, ``file``, ...); ``None``
    means the format's defaults (ONNX: ``cpu`` and ``ref``; tables: ``file``; C: ``c``).
    ``quick``: onnxruntime CPU (or the table's own runtime) over positions
    ``0 .. min(max_len, 4096) - 1`` and a small probe, as ``edgepe export`` runs after writing.
    ``json_path``: also write the JSON report there. ``progress``: a progress bar on stderr;
    ``None`` shows it when stderr is a terminal, ``True`` always, ``False`` never; inside an
    ``edgepe.contract.progress.reporting`` block (``edgepe export``'s quick check), that block
    decides.
    ``strict_placement``: fail a GPU provider on which some nodes ran on the CPU.
    ``checkpoint``: the checkpoint a checkpoint-based artifact was exported from (its sha256
    must be the recorded one; without it such an artifact is a ``CheckpointError`` naming it).
    ``rebuild=False`` only for an artifact this process has just written from its manifest's
    inputs (``edgepe.api.export``'s quick check): the second build is skipped.
    ``accept_foreign``: an artifact of another edgepe version whose manifest claims what this
    edgepe does not derive is verified numerically (with this edgepe's values) instead of
    failing; the report lists each such claim (``rebuild.unchecked_claims``).
    ``force``: replace an existing ``json_path`` (never the artifact or its manifest).

    Runtimes run one after the other, each over the same chunks, so at most one of them holds
    the artifact in memory at a time.
    """
    from edgepe.verify import runtimes as rt

    path = artifact_for(path)  # X.onnx.json names X.onnx
    if isinstance(providers, str):  # "cpu,ref", as --providers takes them
        providers = providers.split(",")
    if providers is not None and not isinstance(providers, (list, tuple)):
        raise BadParameterError(f"providers must be a str or a list of runtime names, got "
                                f"{type(providers).__name__}")
    # checked before the sweep, not after it
    if json_path is not None:
        check_output(path_arg(json_path, "json_path"), [path], force, "--json")

    recover(path)  # an export killed between its two renames: settle to a matching pair first
    manifest = read(path)
    fmt = manifest["format"]
    names = rt.resolve_runtimes(
        list(providers) if providers else rt.default_runtimes(fmt, quick), fmt
    )
    if fmt == "tflite" and not providers:  # TFLM by default where its resolver runs the model
        from edgepe.formats.tflite import runs_on

        names = [name for name in names if name in runs_on(manifest)]
    inputs, domains = _check_file(path, manifest)
    if not providers and rt.REF in names and domains:
        # The reference evaluator implements the ONNX standard only; a graph using
        # onnxruntime's contrib ops (com.microsoft.RotaryEmbedding) is checked on onnxruntime.
        names.remove(rt.REF)
    report = Report(str(path), manifest, str(manifest["sha256"]), sha256_file(path), quick=quick)
    if rebuild:
        rebuilt = rb.rebuild(path, manifest, checkpoint, accept_foreign=accept_foreign)
    else:
        rebuilt = rb.just_built(path, manifest, checkpoint)
    report.rebuild = rebuilt
    if rebuilt.ok or rebuilt.bytes_match or fmt in ("npy", "bin"):
        # After a failed rebuild only bytes that ARE the rebuild (the manifest differs) or a
        # table file (read by numpy, never run) are swept, bounded to the quick sweep (an
        # edited max_len must not make it run for ever), to say what the difference does.
        _parity(report, path, rebuilt, names, inputs, quick or not rebuilt.ok, progress,
                strict_placement)
    else:
        # A graph or C header that is not what its recorded inputs build is never run nor
        # compiled: the rebuild's difference says what is wrong, and running it would trust it.
        for name in names:
            result = Comparison(name, tolerance_for(rebuilt.manifest or manifest)).finish()
            result.error = ("not run: the file is not the rebuild of its recorded inputs, so it "
                            "is not compiled or run")
            report.results.append(result)
    if json_path is not None:
        from edgepe.verify.report import write_json

        write_json(report, json_path, force)
    return report


def _parity(report, path, rebuilt, names, inputs, quick, progress, strict_placement) -> None:
    """Every runtime over the sweep, against the rebuilt reference module and tolerances."""
    from edgepe.verify.sweep import in_range_total, onnx_chunks, table_chunks, unswept

    # What the file claims beyond its inputs (out-of-range policy, limit, dtype, int8 scale,
    # shape) is never believed here: the rebuilt manifest (this edgepe's) decides the reference;
    # the file's own claims were compared with it by the rebuild.
    manifest = rebuilt.manifest or report.manifest
    config, module = rebuilt.config.scheme, rebuilt.module
    if manifest["mode"] == "sliced" and config.scheme in ("rope", "sinusoidal"):
        # checked against the float64 definition, not the float32 recipe
        from edgepe.schemes.definition import Definition, reference_distance

        stop = min(config.max_len, QUICK_DISTANCE) if quick else config.max_len
        report.reference_distance = reference_distance(module, stop)
        module = Definition(module)
    # The registry's tolerance and the quantiser's proven bound, as the rebuild states them.
    tolerance = tolerance_for(rebuilt.manifest)
    probe_tolerance = tolerance_for(rebuilt.manifest, probe=True)
    by_position = (manifest["format"] in ("onnx", "pte", "tflite")
                   or manifest["mode"] in ("compute", "sliced"))
    shape = tuple(int(s) for s in manifest["shape"]) if not by_position else None

    def chunks():
        if by_position:
            return onnx_chunks(config, module, manifest, quick, inputs)
        return table_chunks(config, module, shape, quick)

    if not rebuilt.reproduced and rebuilt.ok:
        # numeric only (a foreign build, --accept-foreign): what the sweep leaves unvisited is
        # one more claim left unchecked (issue 41)
        skipped = unswept(config, manifest, quick)
        if skipped:
            rebuilt.unchecked = (*rebuilt.unchecked, skipped)
            rebuilt.note += f"; {skipped}"
    total = in_range_total(config, manifest, quick)
    with reporting(sys.stderr.isatty() if progress is None else progress, force=bool(progress)):
        for name in names:
            result = _verify_on(name, path, report.manifest, manifest, chunks, tolerance,
                                probe_tolerance, by_position,
                                track(f"verify on {name}", total), rebuilt)
            if result.placement is not None:
                _audit_placement(result, result.placement, strict_placement)
            report.results.append(result)


def _verify_on(name, path, manifest, ours, chunks, tolerance, probe_tolerance, by_position,
               advance, rebuilt) -> CompareResult:
    """One runtime over every chunk: graphs and C compute headers evaluate positions
    (``run(feeds)``), table files and C tables give rows (``rows(start, stop)``). The runtime
    reads the file as its own ``manifest`` says (what a user of it gets); the reference is
    stored as ``ours`` (the rebuilt manifest) says, and the output's dtype must be that one's."""
    from edgepe.verify import runtimes as rt

    comparison = Comparison(name, tolerance)
    t0 = time.perf_counter()
    runtime = None
    try:
        if by_position:
            runtime = rt.open_positions_runtime(name, path, manifest, rebuilt)
        else:
            runtime = rt.CRuntime(path, manifest, rebuilt) if name == rt.C else rt.FileRuntime(
                path, manifest)
    except Exception as exc:  # noqa: BLE001 - a runtime that refuses the artifact fails it
        _reraise_bad_input(exc)
        comparison.fail(f"could not load the artifact: {_first_line(exc)}")
    placement = None
    first = None
    if runtime is not None:
        try:
            for chunk in chunks():
                first = first or (None if chunk.probe else chunk)
                try:
                    if by_position:
                        actual = runtime.run(chunk.feeds)
                    else:
                        actual = runtime.rows(chunk.start, chunk.start + chunk.positions)
                except Exception as exc:  # noqa: BLE001 - a run that fails is a failed result
                    comparison.fail(f"run failed: {_first_line(exc)}")
                    break
                expected = _as_stored(chunk.expected, ours)
                wrong = _wrong_dtype(actual, expected, ours)
                if wrong:
                    comparison.fail(wrong)
                    break
                comparison.update(actual, expected, chunk.where,
                                  chunk.positions, probe_tolerance if chunk.probe else None)
                advance(chunk.progress)
            if name in GPU_RUNTIMES and first is not None and comparison.result.error is None:
                _past_kernel_limits(runtime, first, comparison, ours)
            placement = getattr(runtime, "placement", None)
        finally:
            getattr(runtime, "close", lambda: None)()
    result = comparison.finish()
    result.seconds = time.perf_counter() - t0
    result.placement = placement
    return result


# Issue 44: a graph that runs at the sweep's chunk sizes can still fail a GPU kernel's launch
# past a grid limit: onnxruntime's CUDA RotaryEmbedding failed from 65,536 rows per call ("CUDA
# failure 1: invalid argument") until the fused sliced graph folded its rows. On these providers
# one more call goes past every such limit edgepe knows: twice CUDA's 65,535 and one.
GPU_RUNTIMES = ("cuda", "trt")
PAST_KERNEL_LIMITS = 2 * CUDA_GRID_YZ_LIMIT + 1
PAST_LIMITS_ELEMENTS = 2**27  # 512 MiB of float32 output: wider rows skip the call


def _past_kernel_limits(runtime, chunk, comparison: Comparison, ours: dict[str, Any]) -> None:
    """Run ``chunk``'s positions (already compared) tiled to ``PAST_KERNEL_LIMITS`` in one call
    and compare every row with the same reference; only for graphs of one ``positions [N]``
    input and one row per position (the encodings, not bias grids or apply graphs)."""
    feeds = chunk.feeds
    pos = feeds.get("positions")
    expected = np.asarray(chunk.expected)
    if list(feeds) != ["positions"] or pos is None or pos.ndim != 1 or not len(pos) or \
            expected.shape[:1] != pos.shape or \
            PAST_KERNEL_LIMITS * max(1, expected[0].size) > PAST_LIMITS_ELEMENTS:
        return
    reps = -(-PAST_KERNEL_LIMITS // len(pos))
    n = reps * len(pos)
    tiled = np.tile(pos, reps)
    try:
        actual = runtime.run({"positions": tiled})
    except Exception as exc:  # noqa: BLE001 - a run that fails is a failed result
        comparison.fail(f"run of {n} positions in one call (past 65535 rows: CUDA's grid "
                        f"limit) failed: {_first_line(exc)}")
        return
    want = _as_stored(np.tile(expected, (reps,) + (1,) * (expected.ndim - 1)), ours)
    size = len(pos)

    def where(index: tuple[int, ...]) -> str:
        return f"{chunk.where((index[0] % size, *index[1:]))} (in one call of {n} positions)"

    comparison.update(actual, want, where, n)


def _audit_placement(result: CompareResult, placement: dict, strict: bool) -> None:
    """Record where the nodes ran. On any provider but the CPU one (CUDA, TensorRT, ...), nodes
    that onnxruntime placed on its CPU fallback are noted, or fail the run when ``strict``."""
    from edgepe.verify.runtimes import CPU_PROVIDER

    result.placement = placement
    if result.runtime == "cpu":
        return
    on_cpu = placement.get(CPU_PROVIDER, {})
    if not on_cpu:
        result.placement_note = f"every node ran on the {result.runtime} provider"
        return
    ops = ", ".join(f"{op} x{n}" for op, n in on_cpu.items())
    total = sum(sum(v.values()) for v in placement.values())
    note = (f"{sum(on_cpu.values())} of {total} nodes ran on the CPU ({ops}): onnxruntime's "
            f"{result.runtime} provider has no kernel for them; export with --lowering arith "
            "to keep the graph on the GPU")
    result.placement_note = note
    if strict:
        result.placement_error = "--strict-placement: " + note


def _reraise_bad_input(exc: BaseException) -> None:
    """A missing tool (no C compiler) is bad input for the whole run, not a parity failure."""
    if isinstance(exc, EdgepeError) and exc.exit_code == 2:
        raise exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
