"""Library mutation testing (mutmut) per module, each with the tests that cover it (issue 33).

    .venv/bin/python scripts/mutation.py --modules edgepe/contract/manifest.py --write
    .venv/bin/python scripts/mutation.py --changed --budget-s 150   # what CI runs
    .venv/bin/python scripts/mutation.py --changed origin/main     # and what git says changed
    .venv/bin/python scripts/mutation.py --list
    .venv/bin/python scripts/mutation.py --render    # docs/mutation.md from docs/mutation.json

Beside scripts/mutants.py (hand-written semantic mutants), this runs mutmut 3 (the dev extra):
every operator, constant, comparison, argument and string inside each function of a module
is changed, one mutant at a time, in a scratch copy of the repository (never the real tree), and
the tests that MODULES lists for that module run against it. A mutant no test fails survives.

MODULES (below: module path -> its tests) is the one place that names modules, so a module that
moves (issue 31's layers) changes one line here. EQUIVALENT lists the survivors that no test can
kill because they do not change behaviour, each with its reason; every other survivor is to be
killed by a new test.

Score = (killed + timeout) / (mutants - equivalent), mutmut's convention; "no tests" (no
selected test reaches the mutated function) and mutants of a run that did not finish count as
not killed. ``--write`` records the
per-module result in docs/mutation.json, with the SHA-256 of the module's source it ran on, and
regenerates docs/mutation.md from it (modules run and not yet run). ``--changed`` runs the
recorded modules whose source differs from the one recorded: a fresh clone needs no base branch
to know what a change touched since the last recorded run. ``--changed BASE`` adds the modules
whose file differs from ``BASE`` (git). ``--budget-s`` stops starting modules once spent (a
module started gets the rest of the budget); ``--module-s`` caps each module.
Exit 1 when a module recorded in docs/mutation.json scores below its recorded score or has a
survivor that is neither recorded nor equivalent (a change let a new bug through); a module not
recorded yet is reported only. Exit 2 on bad arguments.

mutmut mutates inside functions only: module-level constants (``MAX_BYTES = 1 << 20``) are not
mutated by it; tests/test_edges.py pins those as literals and scripts/mutants.py plants some.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_JSON = ROOT / "docs" / "mutation.json"
DOCS_MD = ROOT / "docs" / "mutation.md"

# Module -> the tests that cover it (fast ones: each mutant reruns those reaching its function).
# The contract-level modules first (issue 33's order); paths are data, fixed here when they move.
# Every module of contract, graphs, formats, export/compare, rebuild, verify and graft is listed
# but those with no function for mutmut to mutate (constants only: contract/version.py,
# formats/c_schemes.py, the package __init__ files of contract and formats).
# tests/test_paths.py's tests of check_untrusted (the rest of that file runs exports: slow)
_CHECK_UNTRUSTED = tuple(f"tests/test_paths.py::test_{name}" for name in (
    "an_emitted_op_is_accepted", "a_subgraph_in_an_attribute_of_an_emitted_op_is_refused",
    "a_list_of_subgraphs_in_an_attribute_is_refused", "a_plain_attribute_is_not_a_subgraph",
    "the_op_allow_list_is_per_domain",
    "external_data_sparse_initializers_and_functions_are_refused"))
MODULES: dict[str, tuple[str, ...]] = {
    "edgepe/contract/errors.py": ("tests/test_cli_errors.py", "tests/test_mutation_kills.py"),
    "edgepe/contract/manifest.py": ("tests/test_edges.py", "tests/test_mutation_kills.py"),
    "edgepe/rebuild.py": ("tests/test_rebuild_claims.py", "tests/test_compare_fields.py",
                          "tests/test_rebuild_paths.py"),
    "edgepe/targets/check.py": ("tests/test_edges.py", "tests/test_mutation_kills.py"),
    "edgepe/graphs/quant.py": ("tests/test_bound_pins.py", "tests/test_mutation_kills.py"),
    "edgepe/audit.py": ("tests/test_graph_audit.py", "tests/test_mutation_kills.py",
                        "tests/test_describe.py"),
    "edgepe/graphs/untrusted.py": ("tests/test_tensor_bound.py", "tests/test_mutation_kills.py",
                                   *_CHECK_UNTRUSTED),
    "edgepe/export/compare.py": ("tests/test_compare_fields.py", "tests/test_rebuild_paths.py",
                                 "tests/test_artifact_io.py"),
    "edgepe/contract/commit.py": ("tests/test_commit.py", "tests/test_artifact_io.py"),
    "edgepe/verify/compare.py": ("tests/test_verify_compare.py", *(
        f"tests/test_verify.py::test_{name}" for name in (
            "compare_counts_nan_and_shape_mismatches_without_raising",
            "strict_placement_fails_a_gpu_run_with_cpu_nodes_and_names_the_lowering"))),
    "edgepe/formats/npy.py": ("tests/test_table_files.py", "tests/test_tables.py"),
    "edgepe/formats/bin.py": ("tests/test_table_files.py", "tests/test_tables.py",
                              "tests/test_edges.py"),
    "edgepe/graft/prove.py": ("tests/test_prove_helpers.py",),
    "edgepe/contract/checkpoint.py": ("tests/test_checkpoint_load.py",),
    "edgepe/contract/config.py": ("tests/test_output_rules.py", "tests/test_edges.py",
                                  "tests/test_defaults.py", "tests/test_artifact_io.py"),
    "edgepe/contract/progress.py": ("tests/test_progress.py",),
    "edgepe/graphs/int8.py": ("tests/test_bound_pins.py", "tests/test_edges.py"),
    "edgepe/graphs/__init__.py": ("tests/test_export_onnx.py",),
    "edgepe/graphs/_common.py": ("tests/test_edges.py", "tests/test_export_onnx.py"),
    "edgepe/graphs/bias.py": ("tests/test_bias_tables.py",),
    "edgepe/graphs/bits.py": ("tests/test_export_onnx.py",),
    "edgepe/graphs/integer.py": ("tests/test_export_onnx.py",),
    "edgepe/graphs/lowerings.py": ("tests/test_lowerings.py",),
    "edgepe/graphs/model_tensors.py": ("tests/test_graft_hf.py",),
    "edgepe/graphs/sliced.py": ("tests/test_sliced.py",),
    "edgepe/graphs/table.py": ("tests/test_export_onnx.py",),
    "edgepe/graphs/table_values.py": ("tests/test_bias_tables.py", "tests/test_clamp_hostile.py"),
    "edgepe/graphs/trig.py": ("tests/test_rope.py",),
    "edgepe/formats/c.py": ("tests/test_c_header.py",),
    "edgepe/formats/c_sliced.py": ("tests/test_sliced.py",),
    "edgepe/formats/onnx.py": ("tests/test_export_float_graphs.py", "tests/test_edges.py"),
    "edgepe/formats/onnx_table.py": ("tests/test_verify_table_memory.py",),
    "edgepe/formats/pte.py": ("tests/test_pte.py",),
    "edgepe/verify/__init__.py": ("tests/test_verify.py",),
    "edgepe/verify/c_runner.py": ("tests/test_c_header.py",),
    "edgepe/verify/cortex_m.py": ("tests/test_cortex_m.py",),
    "edgepe/verify/report.py": ("tests/test_verify.py",),
    "edgepe/verify/runtimes.py": ("tests/test_verify.py",),
    "edgepe/verify/sweep.py": ("tests/test_verify.py",),
    "edgepe/graft/__init__.py": ("tests/test_graft.py", "tests/test_paths.py"),
    "edgepe/graft/find.py": ("tests/test_graft.py",),
    "edgepe/graft/find_hf.py": ("tests/test_graft_hf.py",),
    "edgepe/graft/lower.py": ("tests/test_graft_lower.py",),
    "edgepe/graft/read.py": ("tests/test_graft.py", "tests/test_graft_hf.py"),
    "edgepe/graft/report.py": ("tests/test_graft.py",),
    "edgepe/graft/splice.py": ("tests/test_graft_splice.py", *(
        f"tests/test_paths.py::test_{name}" for name in (
            "reconcile_branches", "reconcile_refuses_what_it_cannot_convert"))),
}

# Survivors that change no behaviour, by mutmut's name, with the reason (each reviewed by hand).
ERR, MAN = "edgepe.contract.errors.x_", "edgepe.contract.manifest.x_"  # mutmut's name prefixes
CMP = "edgepe.export.compare."  # (methods are named xǁClassǁmethod)
VCMP = "edgepe.verify.compare."
UNT = "edgepe.graphs.untrusted.x_"
COM = "edgepe.contract.commit.x_"
CKP = "edgepe.contract.checkpoint.x_"
BIAS = "edgepe.graphs.bias.x_"
PRV = "edgepe.graft.prove.x_"  # h-m2
SPL = "edgepe.graft.splice.x_"  # h-m2
LOW = "edgepe.graft.lower.x_"  # h-m2
EQUIVALENT: dict[str, str] = {
    ERR + "did_you_mean__mutmut_8": "n=1 dropped (default 3): get_close_matches sorts "
    "best first and only close[0] is used",
    ERR + "did_you_mean__mutmut_11": "n=1 -> n=2: only close[0], the best, is used",
    ERR + "did_you_mean__mutmut_9": "cutoff=0.6 dropped: 0.6 is difflib's default",
    **{f"{MAN}open_regular__mutmut_{i}": "O_CLOEXEC dropped or misspelt: Python's "
       "os.open makes every descriptor non-inheritable anyway (PEP 446), and os.O_CLOEXEC "
       "exists on Linux" for i in (22, 24, 27, 28, 29, 30)},
    MAN + "read_bytes__mutmut_15": "read(None) instead of read(max_bytes + 1): the "
    "same refusal; differs only in memory when the file grows between fstat and read (a race "
    "a test cannot stage without a writer thread)",
    MAN + "read_bytes__mutmut_17": "read(max_bytes + 2): any read past max_bytes "
    "gives the same refusal",
    MAN + "loads__mutmut_4": "decode('UTF-8'): codec names are case-insensitive",
    MAN + "loads__mutmut_29": "the type-name fallback for an empty message is "
    "unreachable: json's errors and ours always carry a message (and nesting is bounded "
    "before parsing, so no RecursionError)",
    MAN + "loads__mutmut_33": "same unreachable fallback (type(None).__name__)",
    MAN + "loads__mutmut_32": "same unreachable fallback (its condition always "
    "true: every message is non-empty)",
    MAN + "nesting_depth__mutmut_9": "strings replaced by 'XXXX' instead of '': "
    "neither holds a bracket",
    MAN + "nesting_depth__mutmut_17": "encode() as UTF-8 instead of ASCII with "
    "replacement: UTF-8 multibyte sequences never contain the bytes of [ { ] }",
    MAN + "nesting_depth__mutmut_20": "'ASCII' vs 'ascii': codec names are "
    "case-insensitive",
    **{f"{CMP}x_first_difference__mutmut_{i}": "zip's strict flag: the lists' lengths were "
       "compared just before, so strict never fires" for i in (34, 37, 38)},
    **{f"{CMP}xǁ_CompareWriterǁwrite__mutmut_{i}": "zip(strict=False) is the default: None or no "
       "argument is the same" for i in (19, 22)},
    CMP + "xǁ_CompareWriterǁfinish__mutmut_3": "read(None) instead of read(1): any byte past the "
    "rebuild is as truthy; reads the rest of a longer file (memory only)",
    CMP + "xǁ_CompareWriterǁfinish__mutmut_4": "read(2) instead of read(1): one byte past the "
    "rebuild is as truthy",
    **{f"{CMP}x__onnx_difference__mutmut_{i}": "getattr's default for .name/.op_type: every "
       "ValueInfo, TensorProto and NodeProto has a name field and a node an op_type, so the "
       "default is never used" for i in (33, 36, 39, 42, 45, 48)},
    CMP + "x_check_replace__mutmut_13": "closefd=True dropped: True is open()'s default",
    **{f"{CMP}x_check_replace__mutmut_{i}": "open_regular's 'what' (the word naming the file "
       "in its refusal): manifest.read() just refused a PATH that is not a regular file with "
       "the same word, so this one shows only if PATH is swapped in between" for i in
       (15, 18, 19)},
    CMP + "x_check_replace__mutmut_24": "compare's path names where an ONNX file differs, in a "
    "text check_replace drops (it uses only whether there is a difference)",
    **{f"edgepe.rebuild.x_{fn}__mutmut_{i}": "closefd=True dropped: True is open()'s default"
       for fn, i in (("rebuild", 19), ("read_manifest", 53))},
    **{f"edgepe.rebuild.x_read_manifest__mutmut_{i}": "the second open_regular's 'what' word: "
       "the first call, a moment before, refused a PATH that is not a regular file with the "
       "same word; this one shows only if PATH is swapped in between" for i in (43, 46, 47)},
    "edgepe.rebuild.x_read_manifest__mutmut_94": "validate's 'where' names the rebuilt "
    "manifest in a refusal that cannot happen: this edgepe's own export manifest is valid",
    "edgepe.rebuild.x_check_claims__mutmut_3": "inputs taken whatever its type: read() "
    "validated the manifest, whose inputs is always an object",
    **{f"edgepe.audit.x_load_onnx__mutmut_{i}": "the type-name fallback for an empty "
       "message: protobuf's DecodeError and onnx.checker's errors always carry one"
       for i in (12, 25)},
    **{f"{VCMP}xǁComparisonǁupdate__mutmut_{i}": "float('NAN') / float('INF'): float() "
       "reads its special values case-insensitively" for i in (29, 32, 36)},
    **{f"{VCMP}xǁComparisonǁupdate__mutmut_{i}": "astype(None) is astype(float64)"
       for i in (61, 63)},
    VCMP + "xǁToleranceǁallowed__mutmut_6": "astype(None) is astype(float64)",
    VCMP + "xǁComparisonǁupdate__mutmut_112": "the divisor where the expected value is 0 or "
    "not finite (1.0 -> 2.0): those quotients are replaced by 0 by the np.where around it",
    VCMP + "xǁComparisonǁ_keep_for_median__mutmut_7": "errors.size >= room: when the size "
    "equals the room the stride is ceil(size / room) = 1, the same whole chunk",
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "zip's strict flag: the evaluator returns "
       "one value per name asked for, so strict never fires" for i in (92, 95, 102)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "reshape(1) or reshape(-2) (numpy reads any "
       "negative size as unknown) of a Range input: a scalar by ONNX's spec, one element either "
       "way" for i in (118, 119)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "reshape(None) or reshape(-2) of Expand's "
       "shape input: 1-D by ONNX's spec, kept as it is" for i in (152, 156)},
    UNT + "_check_sized_by_shapes__mutmut_124": "count 1 for a step of 0: the step-0 test "
    "refuses it anyway, and the message says 'an endless range' then",
    UNT + "_check_sized_by_shapes__mutmut_131": "an empty Range counted as 1 element: differs "
    "only at budget 0, where the 1-element scalars sizing it (node outputs) are refused first; "
    "a Range of initializers alone is sized by shape inference and never evaluated",
    UNT + "_check_sized_by_shapes__mutmut_164": "astype(None) is astype(float64)",
    UNT + "_check_sized_by_shapes__mutmut_24": "the list 'needed' is never read (the "
    "evaluated nodes are those in 'seen')",
    UNT + "_check_sized_by_shapes__mutmut_48": "the evaluated subgraph's ir_version left to "
    "make_model's default (the newest): the reference evaluator runs the same nodes",
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "the evaluated subgraph's name" for i in
       (59, 60)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "the feeds' dtype: inputs reach the "
       "evaluated nodes only through Shape and Size (a size computed from input values is "
       "refused before), so only their dimensions matter" for i in (81, 85, 87)},
    UNT + "_check_sized_by_shapes__mutmut_96": "run(None, ...) returns every output of the "
    "subgraph, which are the names asked for, in the same (set) order",
    **{f"{UNT}check_tensor_bound__mutmut_{i}": "strict_mode / data_prop dropped: False is "
       "infer_shapes' default for both" for i in (14, 15)},
    UNT + "check_tensor_bound__mutmut_77": "break instead of continue after a Range or Expand "
    "put aside for evaluation: each has one output, so the loop over its outputs ends either "
    "way",
    **{f"{COM}_file_sha__mutmut_{i}": "the block size of the hashing loop (whole file, 2 MiB): "
       "the same digest; memory only" for i in (16, 18, 19)},
    COM + "_journal_sha__mutmut_11": "read(cap + 2)[:cap]: the same cap bytes",
    COM + "_journal_sha__mutmut_9": "read(None)[:cap]: the same cap bytes; memory only (a "
    "journal is written by edgepe under the lock, a few KiB)",
    COM + "_journal_sha__mutmut_19": "a non-string sha returned: it never equals the artifact's "
    "hex digest, so the journal is dropped either way",
    **{f"{COM}{fn}__mutmut_{i}": "unlink's missing_ok: the file was made by this process "
       "under the target's lock a moment before and is there (differs only if another process "
       "removes it in between)" for fn, i in (("_settle", 16), ("_settle", 17),
                                              ("write_pair", 22), ("write_pair", 25),
                                              ("atomic_write", 21), ("atomic_write", 23),
                                              ("write_temp", 27), ("write_temp", 29))},
    COM + "_umask__mutmut_3": "os.umask(1) instead of os.umask(0) to read the mask: either "
    "returns the old mask, which is set back at once",
    "edgepe.contract.commit.xǁ_HashingWriterǁwrite__mutmut_5": "cast('b'): a view of signed "
    "bytes holds the same bytes, hashed and written alike",
    **{f"edgepe.formats.npy.x_read__mutmut_{i}": "np.load's allow_pickle (False dropped, "
       "None, True): the header was checked to be edgepe's (a numeric descr) just before, and "
       "only an object array is unpickled" for i in (17, 20, 23)},
    "edgepe.formats.npy.x_read__mutmut_33": "unpack's path names the file in its size "
    "refusal, unreachable here: the npy header (shape ceil(rows * cols / 8), |u1) was checked "
    "to be that size before",
    "edgepe.contract.config.x_check_writable__mutmut_6": "encode('UTF-8'): codec names are "
    "case-insensitive",
    **{f"{CKP}_implied_d_model__mutmut_{i}": "zip's strict flag: the ranks were compared just "
       "before, so strict never fires" for i in (9, 12, 13)},
    **{f"{CKP}_safetensors_tensors__mutmut_{i}": "safe_open's device: 'cpu' is its default"
       for i in (12, 15)},
    CKP + "is_safetensors__mutmut_14": "head[8:10] of the 9 bytes read is head[8:9]",
    **{f"{CKP}load_into__mutmut_{i}": ".to(None) keeps the tensor's dtype; load_state_dict "
       "(copy_) and torch.equal convert or compare by value anyway" for i in (68, 74)},
    CKP + "load_param_into__mutmut_85": ".to(None) keeps the dtype; copy_ converts to the "
    "parameter's dtype anyway",
    **{f"{CKP}load_param_into__mutmut_{i}": "the offset's default (0 -> None, 1, dropped) and "
       "the scheme test: a learned scheme's params always hold 'offset' (its default 0 is "
       "filled in by resolve), and no other scheme has one" for i in (24, 26, 28, 31, 35)},
    **{f"{CKP}read_state_dict__mutmut_{i}": "without the key's prefix every tensor of the "
       "safetensors file is read; _checked_state then picks the same entries (memory only)"
       for i in (9, 11)},
    CKP + "read_tensor__mutmut_13": "the path _checked_state names in its refusals: a "
    "safetensors tensor reaching it is dense, on the CPU and of an allowed dtype (others were "
    "refused by _safetensors_tensors), so it never refuses",
    CKP + "safetensors_header__mutmut_33": "decode('UTF-8'): codec names are case-insensitive",
    **{f"{CKP}sha256_file__mutmut_{i}": "the block size of the hashing loop: the same digest; "
       "memory only" for i in (13, 15, 16)},
    MAN + "nesting_depth__mutmut_25": "astype(None) is float64: the cumulative "
    "sum of +-1 and 0 is exact, int() of its max the same",
    # graphs/bias.py: constants whose dtype numpy infers the same, axes that name one axis
    BIAS + "_difference__mutmut_12": "np.asarray([-1], None) is int64, the dtype given",
    BIAS + "_difference__mutmut_15": "Unsqueeze of the rank-1 positions at axis +1 or -1: "
    "both make [N, 1]",
    BIAS + "alibi__mutmut_29": "reshape(-2, 1, 1): numpy takes any negative size as the one "
    "inferred, as -1",
    BIAS + "alibi__mutmut_50": "the slopes are float32 already: np.asarray(., None) keeps it",
    BIAS + "gaussian__mutmut_15": "2 sigma^2 is float32 already: np.asarray(., None) keeps it",
    BIAS + "gaussian__mutmut_50": "np.asarray([H, 1, 1], None) is int64, the dtype given",
    # h-m2: graft/prove.py, graft/splice.py, graft/lower.py
    **{f"{PRV}{fn}__mutmut_{i}": "zip's strict flag: onnxruntime returns one array per name "
       "asked for, so strict never fires" for fn, ids in (
           ("_cone_run", (70, 73, 74)), ("_gain", (140, 144, 145)),
           ("prove", (151, 154, 167, 172, 175, 188, 199, 202, 207, 212, 215, 220)),
           ("prove_found", (75, 78, 91, 96, 99, 112))) for i in ids},
    **{f"{PRV}{fn}__mutmut_{i}": "np.arange / np.asarray of Python ints with dtype None is "
       "int64 (numpy 2 on every platform), the dtype given" for fn, ids in (
           ("_feeds", (16, 18)), ("_pe_values", (9, 11)), ("_gain", (77, 79))) for i in ids},
    **{f"{PRV}{fn}__mutmut_{i}": "astype(None) / asarray(., None) of a float32 output is "
       "float64, the dtype given" for fn, ids in (
           ("_max_diff", (9, 10)), ("prove", (245, 247)),
           ("prove_found", (131, 133, 196, 198))) for i in ids},
    **{f"{PRV}{fn}__mutmut_{i}": "max(initial=None) of an output: only an empty array differs "
       "(a ValueError), and every output compared has elements (the runs feed at least one "
       "token)" for fn, ids in (("prove", (242,)), ("prove_found", (128, 193))) for i in ids},
    PRV + "prove__mutmut_45": "max(initial=None) of the PE's rows: there are max_len >= 1 of "
    "them (the manifest schema's minimum), never empty",
    PRV + "prove__mutmut_47": "max(initial=1.0) inside max(1.0, .): the same max(1, max|PE|)",
    **{f"{PRV}{fn}__mutmut_{i}": "rng.integers(n) draws from 0 .. n - 1 as rng.integers(0, n): "
       "numpy's low defaults to 0 (the same stream, checked)" for fn, ids in (
           ("_feeds", (24, 56)), ("hf_feeds", (88,))) for i in ids},
    **{f"{PRV}_feeds__mutmut_{i}": "a bool input fed rng.integers(0, 2) cast to bool instead of "
       "rng.random() < 0.5: uniformly random booleans either way" for i in (45, 46)},
    PRV + "_feeds__mutmut_49": "random() <= 0.5 instead of < 0.5: a float64 uniform draw is "
    "exactly 0.5 with probability 2^-53",
    **{f"{PRV}_finite__mutmut_{i}": "a list wrapped (or a number not wrapped) before "
       "np.asarray(., object).ravel(): the same numbers come out ([[a, b]] ravels to a, b; a 0-d "
       "array to its one number), and size 0 only for []" for i in (6, 7)},
    **{f"{PRV}_gain__mutmut_{i}": "where the probe's Shape / Slice / Add go in the node list: "
       "onnxruntime sorts the nodes by their inputs when it loads the model (Graph::Resolve), "
       "and this model is only run, never checked or saved" for i in (41, 42, 60, 61, 85, 86)},
    PRV + "_gain__mutmut_21": "4097 probe signs instead of 4096: the Slice takes the last axis's "
    "size of them either way",
    **{f"{PRV}{fn}__mutmut_{i}": "max_len passed to hf_feeds as None: hf_feeds does not read "
       "that parameter" for fn, ids in (("_gain", (117,)), ("prove_found", (53, 142, 211)))
       for i in ids},
    **{f"{PRV}_cone_run__mutmut_{i}": "the cone graph's name: never read" for i in (33, 34)},
    **{f"{PRV}table_pe__mutmut_{i}": "the graph's name: never read" for i in (30, 31)},
    **{f"{PRV}table_pe__mutmut_{i}": "Gather's axis=0 dropped or None: 0 is Gather's default"
       for i in (15, 19)},
    **{f"{PRV}table_pe__mutmut_{i}": "find_min_ir_version_for's ignore_unknown: the one opset "
       "is the default domain's, which onnx knows" for i in (76, 78, 79)},
    **{f"{PRV}_cone_run__mutmut_{i}": "the cone at make_model's IR version instead of the "
       "model's: onnxruntime runs the same nodes (the opsets, kept, choose the ops; the IR "
       "version only bounds what a file may hold)" for i in (47, 48)},
    **{f"{PRV}_session__mutmut_{i}": "providers left to onnxruntime: unobservable with the "
       "default extra's CPU-only onnxruntime, whose default is CPUExecutionProvider alone "
       "(test_a_session_is_cpu_only_and_silent checks it); the [gpu] extra's build would add "
       "CUDA, so this is unobservable here, not harmless" for i in (6, 9)},
    PRV + "_cone_run__mutmut_56": "session.run(None): the cone's outputs are exactly names, in "
    "that order",
    PRV + "_cone_run__mutmut_8": "seen never holds the names: the walk revisits a tensor once "
    "per path to it, and the graph is acyclic, so it ends with the same kept nodes (work only)",
    **{f"{PRV}prove__mutmut_{i}": "session.run(None): names are the grafted model's outputs, and "
       "the original, the table reference and the perturbed one have the same outputs in the "
       "same order (graft_model neither adds, drops nor reorders outputs)"
       for i in (156, 177, 203, 216)},
    **{f"{PRV}{fn}__mutmut_{i}": "the word for the grafted model given to _run: _run tells "
       "'original' apart only; any other word gives the same ParityError" for fn, ids in (
           ("prove", (180, 186, 187)), ("prove_found", (104, 110, 111, 170, 176, 177)))
       for i in ids},
    **{f"{PRV}hf_feeds__mutmut_{i}": "the mask built as float64 ones: it and the positions "
       "made from it (cumsum - 1, 1 at padding) hold the same integers, cast to the input's "
       "dtype when fed" for i in (14, 16)},
    **{f"{PRV}proof_cases__mutmut_{i}": "a sign in the length filter: only the shift case has a "
       "shift (seq + shift = max_len exactly) and only the cache cases a past (each built to "
       "end at max_len at most), so the filter drops the same cases (prefills longer than "
       "max_len, past 0)" for i in (75, 76)},
    **{f"{PRV}proof_manifest__mutmut_{i}": "the key 'quant' misspelt where it is None: "
       "ours.get('quant') is None without it too" for i in (26, 27)},
    **{f"{PRV}{fn}__mutmut_{i}": "the default seed: graft passes its own seed (--seed, "
       "default 0) to prove and prove_found every time" for fn, i in (("prove", 1),
                                                                       ("prove_found", 2))},
    PRV + "prove__mutmut_2": "a third random draw per length by default: graft does not pass "
    "trials, and prove's result has no count of draws (the gain is measured on the first)",
    PRV + "prove__mutmut_52": "the perturbation's signs negated: -s is as random a +-1 draw as s",
    PRV + "prove__mutmut_53": "step / s for s = +-1 is step * s",
    PRV + "prove__mutmut_71": "a static sequence axis of size 0 (seq >= 0): its feeds are empty "
    "and _feeds' ids.flat[-1] fails the same either way",
    **{f"{PRV}prove_found__mutmut_{i}": "the every-position run's pad (None or 1) in hf_feeds: "
       "row 0 of the batch is never padded and holds every position 0 .. max_len - 1, so the "
       "replaced tensors' largest error and value are the same" for i in (141, 151)},
    **{f"{PRV}prove_found__mutmut_{i}": "the appended every-position case's past, pad or shift "
       "below 0: its label reads only max_len and shift < 0, and _gain gets the cases before it"
       for i in (201, 202, 204)},
    PRV + "prove_found__mutmut_207": "the gain measured with bound 0 too: it is multiplied by "
    "the bound, 0",
    PRV + "prove_found__mutmut_244": "gain.get's default: with a bound every compared output "
    "that is not replaced has a gain; without one, it is multiplied by 0",
    **{f"{SPL}{fn}__mutmut_{i}": "attr.g taken whether set or not: an unset g is an empty "
       "graph, with no names and no reads" for fn, i in (("_names", 6), ("_used", 4),
                                                          ("_remove_dead", 34))},
    SPL + "_remove_dead__mutmut_19": "no node ever counts as seen: the walk revisits a node once "
    "per path to it, and the graph is acyclic, so it ends with the same cone (work only)",
    **{f"{SPL}_slim__mutmut_{i}": "weights_from added again or not: embedded_manifest (and "
       "int8's embedded) keep every field but inputs, onnx and sha256, weights_from included"
       for i in (5, 11, 12)},
    SPL + "_value_type__mutmut_8": "strict_mode=False dropped: False is infer_shapes' default",
    SPL + "graft_model__mutmut_134": "one more candidate for graft's own prefix: the first free "
    "one is found before it",
    **{f"{SPL}graft_model__mutmut_{i}": "np.asarray of Python ints with dtype None is int64, "
       "the dtype given" for i in (144, 146)},
    SPL + "reconcile__mutmut_11": "mine <= theirs: equal opsets returned before",
    **{f"{SPL}reconcile__mutmut_{i}": "the type-name fallback for an empty message: onnx's "
       "version converter always says why it failed" for i in (19, 22, 23)},
    **{f"{SPL}splice_found__mutmut_{i}": "zip(strict=False) is the default: None or no "
       "argument is the same" for i in (15, 18)},
    LOW + "lower_interleaved__mutmut_119": "the positions' name left to the fallback: graft's "
    "own Gather of the table reads {prefix}positions_squeezed whenever graft made that tensor, "
    "so the fallback finds the same name",
    **{f"{LOW}lower_interleaved__mutmut_{i}": "np.asarray([0, 0, -1], None) is int64, the "
       "dtype given" for i in (417, 419)},
    LOW + "lower_interleaved__mutmut_51": "shapes None instead of {} after infer_shapes raised: "
    "non-strict inference skips a node it cannot infer instead of raising, for every model "
    "graft has read (it was parsed and found first)",
}

# Mutants mutmut runs but cannot observe, by name pattern: functions called once at import
# (``SCHEMA = _schema()``), before mutmut switches a mutant on in its forked worker, so every
# mutant of them runs the original. Counted as equivalent, with what pins them instead.
UNOBSERVABLE: dict[str, str] = {
    r"edgepe\.manifest\.x__schema__mutmut_\d+": "manifest.SCHEMA is built by _schema() at "
    "import, before mutmut activates a mutant (the mutant never runs); tests/test_edges.py pins "
    "every range, type and required field of SCHEMA instead",
}

TIMEOUT_S = 1800


def snapshot_into(into: Path) -> None:
    """Tracked and untracked-but-not-ignored files (a fresh clone plus your edits)."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True).stdout
    for name in filter(None, out.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, into / name)


def configure(copy: Path, module: str, tests: tuple[str, ...]) -> None:
    """Point mutmut at ``module`` and its tests in the copy's pyproject.toml."""
    pyproject = copy / "pyproject.toml"
    text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", pyproject.read_text())
    text += ("\n[tool.mutmut]\n"
             'source_paths = ["edgepe"]\n'
             # what tests read besides tests/ (docs pages, the README, scripts, CI)
             'also_copy = ["docs", "README.md", "scripts", "constraints.txt", ".ci", "models"]\n'
             f"only_mutate = {json.dumps([module])}\n"
             f"pytest_add_cli_args_test_selection = {json.dumps(list(tests))}\n"
             'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]\n')
    pyproject.write_text(text)


def mutmut(copy: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mutants/ must win
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Its own process group: a run cut by the budget (or Ctrl-C) takes mutmut's forked workers
    # with it, so none keeps a core busy after CI's time for this step.
    with subprocess.Popen([sys.executable, "-m", "mutmut", *args], cwd=copy, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# mutmut's own diff of each mutant, in one process (``mutmut show`` is one process a mutant).
_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({n: get_diff_for_mutant(n) for n in json.loads(sys.stdin.read())}))
"""


def mutmut_python(copy: Path, code: str, stdin: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, input=stdin,
                          capture_output=True, text=True, timeout=600)
    return done.stdout if done.returncode == 0 else ""


def equivalent_reason(name: str) -> str | None:
    if name in EQUIVALENT:
        return EQUIVALENT[name]
    return next((why for pattern, why in UNOBSERVABLE.items() if re.fullmatch(pattern, name)),
                None)


def source_sha256(module: str) -> str:
    return hashlib.sha256((ROOT / module).read_bytes()).hexdigest()


def run_module(module: str, tests: tuple[str, ...], jobs: int, timeout: float) -> dict:
    start = time.monotonic()
    sha = source_sha256(module)
    with tempfile.TemporaryDirectory(prefix="edgepe-mutmut-") as tmp:
        copy = Path(tmp)
        snapshot_into(copy)
        configure(copy, module, tests)
        try:
            done = mutmut(copy, "run", "--max-children", str(jobs), timeout=timeout)
            finished = done.returncode == 0
            tail = (done.stdout + done.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            finished, tail = False, f"timed out after {timeout:.0f} s"
        listing = mutmut(copy, "results", "--all", "true", timeout=120).stdout
        status = dict(re.findall(r"^\s+(\S+): (.+)$", listing, re.M))
        left = [name for name, state in status.items() if state not in ("killed", "timeout")]
        diffs = json.loads(mutmut_python(copy, _DIFFS, json.dumps(left)) or "{}") if left else {}
        survivors = {}
        for name in left:
            diff = [ln for ln in diffs.get(name, "").splitlines()
                    if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]
            survivors[name] = {"status": status[name], "diff": diff[:6]}
    counts: dict[str, int] = {}
    for state in status.values():
        counts[state] = counts.get(state, 0) + 1
    equivalent = sorted(n for n in survivors if equivalent_reason(n) is not None)
    total = len(status)
    # mutmut's convention: a mutant that makes the tests run past 15x their time is caught
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    denominator = total - len(equivalent)
    return {
        "module": module, "source_sha256": sha, "tests": list(tests), "mutants": total,
        "killed": killed,
        "equivalent": len(equivalent), "counts": counts,
        "score": round(100.0 * killed / denominator, 1) if denominator else None,
        "survivors": {n: s for n, s in survivors.items() if n not in equivalent},
        # printed, not recorded: lets a reader check each listed reason against its mutant
        "equivalent_diffs": {n: survivors[n]["diff"] for n in equivalent},
        "finished": finished, "seconds": round(time.monotonic() - start),
        **({} if finished and total else {"note": tail.strip().splitlines()[-1:]}),
    }


def stale_modules(recorded: dict) -> list[str]:
    """The recorded modules whose source is not the one their record ran on."""
    return [m for m in MODULES if m in recorded
            and recorded[m].get("source_sha256") != source_sha256(m)]


def changed_modules(base: str) -> list[str]:
    merge_base = subprocess.run(["git", "-C", str(ROOT), "merge-base", base, "HEAD"],
                                capture_output=True, text=True)
    if merge_base.returncode != 0:
        raise SystemExit(f"error: --changed {base!r} is not a git revision here "
                         "(fetch it, or set EDGEPE_CI_BASE)")
    names = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only",
                            merge_base.stdout.strip()], capture_output=True, text=True,
                           check=True).stdout.split()
    untracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--others",
                                "--exclude-standard"], capture_output=True, text=True,
                               check=True).stdout.split()
    touched = set(names) | set(untracked)
    return [m for m in MODULES if m in touched]


def load_recorded() -> dict:
    recorded = json.loads(DOCS_JSON.read_text()) if DOCS_JSON.is_file() else {}
    return {module: rescore(r) for module, r in recorded.items()}


def rescore(result: dict) -> dict:
    """``result`` with the survivors since listed in EQUIVALENT (or UNOBSERVABLE) moved to the
    equivalent count, its score recomputed: a reason added after a run counts without a rerun.
    Survivors killed by tests written after the run stay until the module is run again."""
    now = [n for n in result["survivors"] if equivalent_reason(n) is not None]
    if not now:
        return result
    out = dict(result, survivors={n: s for n, s in result["survivors"].items() if n not in now},
              equivalent=result["equivalent"] + len(now))
    denominator = out["mutants"] - out["equivalent"]
    out["score"] = round(100.0 * out["killed"] / denominator, 1) if denominator else None
    return out


def render(recorded: dict) -> str:
    lines = [
        "# Library mutation scores (mutmut)",
        "",
        "Written by `scripts/mutation.py --write` (issue 33); do not edit by hand. Each module's",
        "functions are mutated by mutmut 3.8 one mutant at a time in a scratch copy and the tests",
        "listed for it in the script's `MODULES` run against each mutant. Score = (killed +",
        "timeout) / (mutants - equivalent), mutmut's convention (a timeout is a mutant that made",
        "the tests run past 15x their time; on this loaded machine some are slowness). mutmut",
        "does not mutate module-level constants: those are pinned as literals by",
        "`tests/test_edges.py` and planted by `scripts/mutants.py`. Each row keeps the SHA-256",
        "of the source it ran on; CI (`.ci/run`, `--changed`) reruns, within a time budget, every",
        "module whose source has changed since (a row marked *stale*), and fails when one that",
        "finishes has a new survivor or a lower score. A survivor listed below may already be",
        "killed by a test written after its module's last run: rerun the module (`--modules PATH",
        "--write`) to update its row.",
        "",
        "| module | mutants | killed | equivalent | not killed | score | seconds | tests |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for module in MODULES:
        r = recorded.get(module)
        if r is None:
            lines.append(f"| `{module}` | not run yet | | | | | | "
                         f"{', '.join(t.removeprefix('tests/') for t in MODULES[module])} |")
            continue
        score = "-" if r["score"] is None else f"{r['score']:.1f}%"
        unfinished = "" if r["finished"] else " (unfinished)"
        if r.get("source_sha256") != source_sha256(module):
            unfinished += " (stale)"
        lines.append(f"| `{module}` | {r['mutants']} | {r['killed']} | {r['equivalent']} | "
                     f"{len(r['survivors'])} | {score}{unfinished} | {r['seconds']} | "
                     f"{', '.join(t.removeprefix('tests/') for t in r['tests'])} |")
    lines += ["", "Machine: 2-core Intel Xeon (AVX-512) shared by seven engineers (timings are "
              "wall seconds).",
              "", "## Survivors not yet killed", ""]
    any_left = False
    for module, r in recorded.items():
        if not r["survivors"]:
            continue
        any_left = True
        lines.append(f"### `{module}`")
        lines.append("")
        for name, s in sorted(r["survivors"].items()):
            diff = " / ".join(d.strip()[:110] for d in s["diff"]) or "(no diff)"
            lines.append(f"- `{name}` ({s['status']}): `{diff}`")
        lines.append("")
    if not any_left:
        lines += ["None.", ""]
    lines += ["## Equivalent mutants", ""]
    lines += [f"- `{n}`: {why}" for n, why in sorted(EQUIVALENT.items())]
    lines += [f"- every mutant matching `{p}`: {why}" for p, why in sorted(UNOBSERVABLE.items())]
    return "\n".join(lines) + "\n"


def write_docs(recorded: dict) -> None:
    DOCS_JSON.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    DOCS_MD.write_text(render(recorded))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", metavar="PATH", help="modules to run")
    parser.add_argument("--changed", metavar="BASE", nargs="?", const="",
                        help="run the recorded modules whose source changed since their run "
                        "(and, given BASE, those git says changed since BASE)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no module after this many seconds")
    parser.add_argument("--module-s", type=float, default=TIMEOUT_S,
                        help=f"stop a module's run after this many seconds (default {TIMEOUT_S})")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at a time (default 2)")
    parser.add_argument("--write", action="store_true",
                        help="record the results in docs/mutation.json and docs/mutation.md")
    parser.add_argument("--list", action="store_true", help="print MODULES and exit")
    parser.add_argument("--render", action="store_true",
                        help="rewrite docs/mutation.md from docs/mutation.json and exit")
    args = parser.parse_args(argv)
    if args.render:
        write_docs(load_recorded())
        return 0
    if args.list:
        for module, tests in MODULES.items():
            print(f"{module}: {' '.join(tests)}")
        return 0
    unknown = [m for m in args.modules or () if m not in MODULES]
    if unknown:
        print(f"error: not in MODULES: {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    recorded = load_recorded()
    if args.modules:
        modules = list(args.modules)
    elif args.changed is not None:
        touched = set(stale_modules(recorded))
        if args.changed:
            touched |= set(changed_modules(args.changed))
        modules = [m for m in MODULES if m in touched]
        unrecorded = [m for m in MODULES if m not in recorded]
        if unrecorded:
            print(f"mutation: {len(unrecorded)} modules have no recorded run yet (docs/mutation.md)")
    else:
        modules = list(MODULES)
    if not modules:
        print("mutation: no recorded module changed since its run; nothing to run")
        return 0
    start = time.monotonic()
    failed, skipped = [], []
    for module in modules:
        spent = time.monotonic() - start
        if args.budget_s is not None and spent >= args.budget_s:
            skipped.append(module)
            continue
        left = args.module_s if args.budget_s is None else min(args.module_s,
                                                               args.budget_s - spent)
        result = run_module(module, MODULES[module], args.jobs, left)
        score = "-" if result["score"] is None else f"{result['score']:.1f}%"
        print(f"{module}: {result['killed']} of {result['mutants']} killed, "
              f"{result['equivalent']} equivalent, score {score}, {result['seconds']} s"
              + ("" if result["finished"] else f" (unfinished: {result.get('note')})"),
              flush=True)
        old = recorded.get(module)
        new_survivors = set(result["survivors"]) - set((old or {}).get("survivors", {}))
        for name in sorted(result["survivors"]):
            flag = " (new)" if name in new_survivors else ""
            print(f"  survived{flag}: {name}: {' / '.join(result['survivors'][name]['diff'])}")
        for name, diff in sorted(result.pop("equivalent_diffs").items()):
            print(f"  equivalent: {name}: {' / '.join(diff)}")
        # A recorded module must not lose ground; one not recorded yet is reported only.
        if old and result["finished"] and (new_survivors or (
                old["score"] is not None and result["score"] is not None
                and result["score"] < old["score"])):
            failed.append(module)
        recorded[module] = result
        if args.write:  # after each module: a long run stopped midway keeps what it did
            write_docs(recorded)
    if skipped:
        print(f"mutation: budget spent; not run: {', '.join(skipped)}")
    if args.write:
        write_docs({module: rescore(r) for module, r in recorded.items()})
        print(f"wrote {DOCS_JSON.relative_to(ROOT)} and {DOCS_MD.relative_to(ROOT)}")
    if failed and not args.write:
        print(f"mutation: new survivors or a lower score in {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
