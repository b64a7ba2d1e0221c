"""Plant plausible bugs one at a time and check that the test suite catches each (issue 24).

    .venv/bin/python scripts/mutants.py              # every mutant, 2 at a time
    .venv/bin/python scripts/mutants.py --jobs 1 --only smooth-c-default gray-shift

Each mutant is ``(name, file, old snippet, new snippet, tests)``: the snippet must occur exactly
once in the file (else the mutant is reported as drifted, so a code change that moves it is
loud), it is replaced in a scratch copy of the repository (a temp dir; the real tree is never
written), and ``tests`` (pytest node ids or files: the targeted subset that must catch it) run
there with ``-x`` and the copy first on ``PYTHONPATH``. The mutant is caught when that run fails
a test. One baseline run of every subset together on the unmutated copy must pass first (else
"caught" would mean nothing).

Prints a table (mutant, file, caught, by which test) and exits 1 if any mutant survives, drifts
or cannot run, or the baseline fails. ``.ci/run`` runs it after the test suite.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


M = Mutant
DEFAULTS = ("tests/test_defaults.py",)


def oracle(*checks: str) -> tuple[str, ...]:
    """Node ids of tests/test_oracles.py's checks (the functions named ``checks``)."""
    return tuple(f"tests/test_oracles.py::test_oracle[{c}]" for c in checks)


MUTANTS = [
    # -- documented defaults (issue 24: the first three survived every test before) ---------
    M("smooth-c-default", "edgepe/schemes/binary_smooth.py",
      'Param("c", 5.0, float', 'Param("c", 4.0, float', DEFAULTS),
    M("gaussian-sigma-default", "edgepe/schemes/gaussian.py",
      'Param("sigma", 8.0, float', 'Param("sigma", 4.0, float', DEFAULTS),
    M("multiscale-alpha-default", "edgepe/schemes/integer_multiscale.py",
      'Param("alpha", 1.0, float', 'Param("alpha", 2.0, float', DEFAULTS),
    M("multilevel-groups-default", "edgepe/schemes/binary_multilevel.py",
      'Param("groups", 3, int', 'Param("groups", 2, int', DEFAULTS),
    M("sinusoidal-base-1000", "edgepe/schemes/sinusoidal.py",
      'BASE = Param("base", 10000.0,', 'BASE = Param("base", 1000.0,',
      oracle("sinusoidal_published_rows")),
    M("alibi-default-heads", "edgepe/schemes/alibi.py",
      "heads=8,", "heads=4,", DEFAULTS),
    M("integer-c-default", "edgepe/schemes/integer.py",
      "lambda max_len: float(max_len)", "lambda max_len: float(max_len - 1)", DEFAULTS),
    M("learnable-init-w", "edgepe/schemes/integer_learnable.py",
      "nn.Parameter(torch.ones(config.d_model))", "nn.Parameter(torch.zeros(config.d_model))",
      DEFAULTS),
    M("n-bits-ceil-log2-L", "edgepe/schemes/_registry.py",
      "return max(1, int(max_len).bit_length())",
      "return max(1, (int(max_len) - 1).bit_length())", DEFAULTS),
    # -- bias tables, slopes, clamps, offsets ---------------------------------------------
    M("bias-table-shifted-row", "edgepe/graphs/table_values.py",
      "distance = index - (config.max_len - 1)", "distance = index - config.max_len",
      ("tests/test_tables.py::test_round_trip_equals_reference",)),
    M("alibi-slope-off-by-one-head", "edgepe/schemes/alibi.py",
      "exponent = -8.0 * (h + 1) / heads", "exponent = -8.0 * h / heads",
      oracle("alibi_paper_slopes")),
    M("alibi-signed-distance", "edgepe/schemes/alibi.py",
      "(positions.unsqueeze(-1) - key_positions).abs()",
      "(positions.unsqueeze(-1) - key_positions)",
      oracle("alibi_paper_slopes")),
    M("gaussian-sigma-squared", "edgepe/schemes/gaussian.py",
      "torch.tensor(2.0 * sigma * sigma,", "torch.tensor(sigma * sigma,",
      oracle("gaussian_rows")),
    M("normalise-by-L", "edgepe/schemes/_base.py",
      "torch.tensor(float(max(max_len - 1, 1)))", "torch.tensor(float(max(max_len, 1)))",
      oracle("integer_rows", "hybrid_rows")),
    M("learned-clamp-negative", "edgepe/schemes/learned.py",
      "positions.clamp(0, self.config.max_len - 1)", "positions.clamp(-1, self.config.max_len - 1)",
      oracle("learned_rows")),
    M("residual-past-the-end", "edgepe/schemes/sinusoidal_learned.py",
      "(positions < self.config.max_len)", "(positions <= self.config.max_len)",
      oracle("sinusoidal_learned_rows")),
    # -- bit order, Gray, wrap ----------------------------------------------------------------
    M("bits-msb-first", "edgepe/schemes/_base.py",
      "return bit_select(positions, torch.arange(width, dtype=torch.int64), n)",
      "return bit_select(positions, torch.arange(width - 1, -1, -1, dtype=torch.int64), n)",
      oracle("bits_and_signed_rows")),
    M("gray-shift-left", "edgepe/schemes/gray.py",
      "bits(p ^ torch.bitwise_right_shift(p, 1),", "bits(p ^ torch.bitwise_left_shift(p, 1),",
      oracle("gray_rows")),
    M("gray-no-wrap", "edgepe/schemes/gray.py",
      "p = wrap(positions, self.config.n_bits)", "p = positions", oracle("gray_rows")),
    M("signed-offset", "edgepe/schemes/binary_signed.py",
      "2.0 * bits(positions, self.config.d_model, self.config.n_bits) - 1.0",
      "2.0 * bits(positions, self.config.d_model, self.config.n_bits) - 0.5",
      oracle("bits_and_signed_rows")),
    M("binary-2d-y-first", "edgepe/schemes/binary_2d.py",
      "coordinate = positions[:, self.axis]", "coordinate = positions[:, 1 - self.axis]",
      oracle("binary_2d_rows")),
    M("hybrid-bits-first", "edgepe/schemes/hybrid_int_binary.py",
      "half = self.config.d_model // 2", "half = (self.config.d_model + 1) // 2",
      oracle("hybrid_rows")),
    M("gated-gates-swapped", "edgepe/schemes/binary_gated.py",
      "return b * g + lin * h", "return b * h + lin * g", oracle("gated_rows")),
    M("fourier-conjugate", "edgepe/schemes/fourier_binary.py",
      "torch.cat([torch.cos(angle), -torch.sin(angle)], dim=-1)",
      "torch.cat([torch.cos(angle), torch.sin(angle)], dim=-1)",
      oracle("fourier_matches_numpy_fft")),
    # -- sinusoidal and RoPE layout -----------------------------------------------------------
    M("sinusoidal-concatenated", "edgepe/schemes/sinusoidal.py",
      "return torch.stack([torch.sin(theta), torch.cos(theta)], dim=-1).flatten(-2)",
      "return torch.cat([torch.sin(theta), torch.cos(theta)], dim=-1)",
      oracle("sinusoidal_published_rows")),
    M("inverse-frequency-exponent", "edgepe/schemes/sinusoidal.py",
      "(base ** (-2.0 * i / d_model))", "(base ** (-1.0 * i / d_model))",
      oracle("sinusoidal_published_rows")),
    M("rope-frequency-exponent", "edgepe/schemes/rope.py",
      "exponent = torch.arange(0, dim, 2, dtype=torch.float64) / dim",
      "exponent = torch.arange(0, dim, 2, dtype=torch.float64) / (2 * dim)",
      oracle("rope_frequencies_and_llama_rotation")),
    M("rope-half-split-pairs", "edgepe/schemes/rope.py",
      "even, odd = x[..., 0::2], x[..., 1::2]",
      "even, odd = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]",
      oracle("rope_frequencies_and_llama_rotation")),
    M("rope-cache-order", "edgepe/schemes/rope.py",
      "cos, sin = torch.cos(theta), torch.sin(theta)",
      "cos, sin = torch.sin(theta), torch.cos(theta)",
      oracle("rope_frequencies_and_llama_rotation")),
    # -- graph builders: the ONNX graph, not the reference, is wrong ----------------------------
    M("graph-gray-no-wrap", "edgepe/graphs/bits.py",
      'p = g.op("BitwiseAnd", u, g.const((1 << int(wrap)) - 1, np.uint64, "wrap_mask"))',
      "p = u",
      ("tests/test_export_onnx.py::test_bit_family_compute_parity[gray-bitwise-7-default]",)),
    M("graph-integer-divide-by-L", "edgepe/graphs/integer.py",
      "return float(max(config.scheme.max_len - 1, 1))  # L = 1",
      "return float(max(config.scheme.max_len, 1))  # L = 1",
      ("tests/test_export_onnx.py::test_integer_family_compute_parity[integer-norm-7-default]",)),
    # -- int8 ---------------------------------------------------------------------------------
    M("int8-scale-128", "edgepe/graphs/quant.py",
      "exact = np.asarray(peak, dtype=np.float64) / QMAX\n    s = exact.astype(np.float32)",
      "exact = np.asarray(peak, dtype=np.float64) / 128\n    s = exact.astype(np.float32)",
      ("tests/test_tables.py::test_int8_table_reads_back_within_the_bound",)),
    M("int8-round-down", "edgepe/graphs/quant.py",
      "q = np.rint(np.asarray(x, dtype=np.float64)", "q = np.floor(np.asarray(x, dtype=np.float64)",
      ("tests/test_tables.py::test_int8_table_reads_back_within_the_bound",)),
    # -- files: bit packing, C literals, sha checks -------------------------------------------
    M("bit-packing-big-endian", "edgepe/formats/bin.py",
      "yield np.packbits(flat[:whole], bitorder=BITORDER)", "yield np.packbits(flat[:whole])",
      ("tests/test_tables.py::test_bit_packed_unpacks_to_the_reference_bits",)),
    M("c-float-6-digits", "edgepe/formats/c.py",
      'cell, flat = "%.9gf",', 'cell, flat = "%.6gf",',
      ("tests/test_c_header.py::test_header_matches_reference[sinusoidal-table-float32-O2]",)),
    M("sha-check-only-presence", "edgepe/verify/__init__.py",
      "return self.sha256_expected == self.sha256_actual", "return bool(self.sha256_expected)",
      ("tests/test_verify.py::test_a_sha256_mismatch_is_its_own_failure_exit_1",)),
    # -- issue 33: the planted bugs that survived the suite, one each ----------------------------
    # (each runs the test function that caught it in a run of its whole file: one pytest start
    # and that function's cases, not the file's other tests before it)
    M("manifest-read-limit-doubled", "edgepe/contract/manifest.py",
      "MAX_BYTES = 1 << 20", "MAX_BYTES = 1 << 21",
      ("tests/test_edges.py::test_limits_are_the_documented_numbers",)),
    M("manifest-depth-off-by-one", "edgepe/contract/manifest.py",
      "if depth > MAX_DEPTH:", "if depth > MAX_DEPTH + 1:",
      ("tests/test_edges.py::test_manifest_depth_limit_at_its_edge",)),
    M("target-opset-range-end", "edgepe/targets/check.py",
      "if opset is not None and not lo <= opset <= hi:",
      "if opset is not None and not lo <= opset < hi:",
      ("tests/test_edges.py::test_target_opset_range_ends_and_verdict",)),
    M("target-verdict-ignores-graph-problems", "edgepe/targets/check.py",
      "return not self.problems and all(n.supported for n in self.nodes)",
      "return all(n.supported for n in self.nodes)",
      ("tests/test_edges.py::test_target_opset_range_ends_and_verdict",)),
    M("rebuild-longer-file-not-flagged", "edgepe/export/compare.py",
      "if self.offset is None and self._f.read(1):", "if False:",
      ("tests/test_compare_fields.py::test_file_differences_give_the_offset",)),
    M("rebuild-skips-one-field", "edgepe/export/compare.py",
      "for key in sorted(set(a) | set(b)):", 'for key in sorted(set(a) | set(b) - {"seed"}):',
      ("tests/test_compare_fields.py::test_each_field_removed_alone_is_named",)),
    M("rebuild-1.0-equals-1", "edgepe/export/compare.py",
      "if a == b and type(a) is type(b):", "if a == b:",
      ("tests/test_compare_fields.py::test_look_alikes_differ",)),
    M("graft-reconcile-branch", "edgepe/graft/splice.py",
      "    if mine < theirs:", "    if mine > theirs:", ("tests/test_paths.py::"
                                                          "test_reconcile_branches",)),
    M("graft-proof-tolerance-factor", "edgepe/graft/prove.py",
      "checks = [worst[name].check(name, 2 * gain[name] * eps)",
      "checks = [worst[name].check(name, 3 * gain[name] * eps)",
      ("tests/test_paths.py::test_the_proof_tolerance_is_twice_gain_times_eps_plus_64_ulp",)),
    M("graft-removed-bytes-without-initializers", "edgepe/graft/splice.py",
      'result["bytes"] += t.ByteSize()', 'result["bytes"] += 0',
      ("tests/test_paths.py::test_removed_bytes_count_nodes_and_initializers",)),
    M("cortex-m-calibration-constant", "edgepe/verify/cortex_m.py",
      "per_tick = 400000 / calib", "per_tick = 200000 / calib",
      ("tests/test_cortex_m.py::test_instructions_follow_from_the_board_clock",)),
    M("int8-output-bound-383u", "edgepe/graphs/int8.py",
      "s64 * (0.5 + 383 * U32)", "s64 * (0.5 + 127 * U32)",
      ("tests/test_bound_pins.py::test_quantised_output_bound_per_channel",)),
    M("int8-residual-bound-2u", "edgepe/graphs/int8.py",
      "2 * U32 * (1 + m + s64)", "U32 * (1 + m + s64)",
      ("tests/test_bound_pins.py::test_residual_bound_per_channel",)),
    M("int8-projection-one-sum", "edgepe/graphs/int8.py",
      "sums = 1 if exact else 2", "sums = 1",
      ("tests/test_bound_pins.py::test_projection_bound_per_channel",)),
    M("audit-attribute-subgraphs-unchecked", "edgepe/graphs/untrusted.py",
      'a.HasField("g") or len(a.graphs)', "len(a.graphs)",
      ("tests/test_paths.py::test_a_subgraph_in_an_attribute_of_an_emitted_op_is_refused",)),
    M("audit-allow-list-ignores-domain", "edgepe/graphs/untrusted.py",
      'EMITTED_OPS.get(node.domain or "", ())',
      'set().union(*EMITTED_OPS.values())',
      ("tests/test_paths.py::test_the_op_allow_list_is_per_domain",)),
    M("cli-ctrl-c-exit-1", "edgepe/cli/__init__.py",
      "raise typer.Exit(130)", "raise typer.Exit(1)",
      ("tests/test_paths.py::test_ctrl_c_mid_export_exits_130_and_leaves_nothing_half_written",)),
    M("pte-bias-axes-swapped", "edgepe/formats/pte.py",
      "return self._rows(rows).permute(2, 0, 1)", "return self._rows(rows).permute(2, 1, 0)",
      ("tests/test_pte.py::test_every_scheme_runs_on_executorch_with_parity[alibi-table]",)),
]


def snapshot(root: Path) -> dict[str, bytes]:
    """Tracked and untracked-but-not-ignored files (what a fresh clone plus your edits hold),
    read once: every copy is made from this, so editing the tree during a run changes nothing."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    names = [f for f in out.decode().split("\0") if f and (root / f).is_file()]
    return {f: (root / f).read_bytes() for f in names}


def scratch_copy(files: dict[str, bytes], into: Path) -> Path:
    for name, data in files.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_bytes(data)
    return into


def pytest_run(copy: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(copy), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S} s"
    return done.returncode, done.stdout + done.stderr


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return match.group(1) if match else output.strip().splitlines()[-1][:80]


def run_mutant(mutant: Mutant, files: dict[str, bytes]) -> tuple[str, str, float]:
    """``(status, detail, seconds)``: status is caught, SURVIVED, DRIFTED or ERROR; seconds is
    the mutant's wall time (copy, pytest), printed so a slow subset shows (.ci/run's budget)."""
    start = time.monotonic()
    status, detail = _run_mutant(mutant, files)
    return status, detail, time.monotonic() - start


def _run_mutant(mutant: Mutant, files: dict[str, bytes]) -> tuple[str, str]:
    with tempfile.TemporaryDirectory(prefix=f"edgepe-mutant-{mutant.name}-") as tmp:
        copy = scratch_copy(files, Path(tmp))
        target = copy / mutant.file
        text = target.read_text() if target.is_file() else ""
        found = text.count(mutant.old)
        if found != 1:
            return "DRIFTED", f"old snippet found {found} times"
        target.write_text(text.replace(mutant.old, mutant.new))
        code, output = pytest_run(copy, mutant.tests)
    if code == 0:
        return "SURVIVED", "tests passed: " + " ".join(mutant.tests)
    if code in (1, 2):  # a test failed (1), or collecting the tests failed on the mutant (2)
        return "caught", first_failure(output)
    return "ERROR", f"pytest exit {code}: {output.strip().splitlines()[-1][:80] if output else ''}"


def baseline(files: dict[str, bytes], mutants: list[Mutant]) -> str | None:
    """Every selected subset passes on the unmutated copy, which is what the tests import."""
    with tempfile.TemporaryDirectory(prefix="edgepe-mutant-baseline-") as tmp:
        copy = scratch_copy(files, Path(tmp))
        env = {**os.environ, "PYTHONPATH": str(copy)}
        where = subprocess.run([sys.executable, "-c", "import edgepe; print(edgepe.__file__)"],
                               cwd=copy, env=env, capture_output=True, text=True).stdout.strip()
        if not where.startswith(str(copy)):
            return f"the copy's tests would import edgepe from {where}, not the copy"
        code, output = pytest_run(copy, tuple(dict.fromkeys(t for m in mutants for t in m.tests)))
        if code != 0:
            return f"baseline fails: {first_failure(output)}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    args = parser.parse_args(argv)
    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names), "mutant names must be unique"
    unknown = set(args.only or ()) - set(names)
    if unknown:
        print(f"error: unknown mutant(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    start = time.monotonic()
    files = snapshot(ROOT)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # The baseline runs beside the first mutants, not before them (a core idle for its 15 s
        # otherwise); a failing baseline still fails the run before any result is shown.
        checked = pool.submit(baseline, files, mutants)
        results = list(pool.map(lambda m: run_mutant(m, files), mutants))
        problem = checked.result()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    width = max(len(m.name) for m in mutants)
    fwidth = max(len(m.file) for m in mutants)
    print(f"{'mutant':<{width}}  {'file':<{fwidth}}  {'result':<8}  {'s':>5}  by")
    for m, (status, detail, seconds) in zip(mutants, results, strict=True):
        print(f"{m.name:<{width}}  {m.file:<{fwidth}}  {status:<8}  {seconds:5.1f}  {detail}")
    bad = [m.name for m, (status, *_) in zip(mutants, results, strict=True) if status != "caught"]
    print(f"{len(mutants) - len(bad)} of {len(mutants)} caught in {time.monotonic() - start:.0f} s"
          + (f"; not caught: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
