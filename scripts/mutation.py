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
# tests/test_graft_whole.py's grafts of Whisper's encoder table (graft/__init__.py's and
# find_hf.py's lines for it); not its comparison with transformers (a 6 s import per run)
_WHOLE = tuple(f"tests/test_graft_whole.py::test_{name}" for name in (
    "a_whisper_table_added_whole_is_found_with_edgepe_params",
    "graft_replaces_the_table_by_an_equal_one_edgepe_rebuilt",
    "sliced_leaves_no_table_of_positions_and_no_trig",
    "a_table_added_whole_that_is_not_whispers_is_kept_and_named",
    "the_encoders_table_and_the_decoders_are_both_replaced",
    "int8_rows_are_held_to_their_quantisation_bound",
    "a_mode_the_table_cannot_take_is_refused_in_one_line",
    "a_table_gathered_by_an_unfolded_range_of_constants_is_added_whole"))
MODULES: dict[str, tuple[str, ...]] = {
    "edgepe/contract/errors.py": ("tests/test_cli_errors.py", "tests/test_mutation_kills.py"),
    "edgepe/contract/manifest.py": ("tests/test_edges.py", "tests/test_mutation_kills.py"),
    "edgepe/rebuild.py": ("tests/test_rebuild_claims.py", "tests/test_compare_fields.py",
                          "tests/test_rebuild_paths.py"),
    "edgepe/targets/check.py": ("tests/test_edges.py", "tests/test_mutation_kills.py"),
    "edgepe/graphs/quant.py": ("tests/test_mut_quant.py", "tests/test_bound_pins.py",
                              "tests/test_mutation_kills.py"),
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
    "edgepe/formats/bin.py": ("tests/test_mut_bin.py",),
    "edgepe/graft/prove.py": ("tests/test_prove_helpers.py",),
    "edgepe/contract/checkpoint.py": ("tests/test_checkpoint_load.py",),
    "edgepe/contract/config.py": ("tests/test_output_rules.py", "tests/test_edges.py",
                                  "tests/test_defaults.py", "tests/test_artifact_io.py"),
    "edgepe/contract/progress.py": ("tests/test_progress.py",),
    "edgepe/graphs/int8.py": ("tests/test_mut_int8.py",),
    "edgepe/graphs/__init__.py": ("tests/test_goldens.py",),
    "edgepe/graphs/_common.py": ("tests/test_graph_common.py", "tests/test_goldens.py"),
    # the goldens pin the graph's bytes: its constants' names and dtypes, Gather's axis written
    "edgepe/graphs/bias.py": ("tests/test_bias_tables.py", "tests/test_goldens.py"),
    "edgepe/graphs/bits.py": ("tests/test_mut_bits.py", "tests/test_goldens.py"),
    "edgepe/graphs/integer.py": ("tests/test_goldens.py",),
    "edgepe/graphs/lowerings.py": ("tests/test_mut_lowerings.py", "tests/test_lowerings.py"),
    "edgepe/graphs/model_tensors.py": ("tests/test_model_tensors.py",),
    "edgepe/graphs/sliced.py": ("tests/test_mut_sliced.py",),
    "edgepe/graphs/table.py": ("tests/test_table_graph.py", "tests/test_table_size.py",
                               "tests/test_goldens.py"),
    "edgepe/graphs/table_values.py": ("tests/test_table_values.py",),
    "edgepe/graphs/trig.py": ("tests/test_mut_trig.py",),
    "edgepe/formats/c.py": ("tests/test_mut_c.py", "tests/test_goldens.py",
                            "tests/test_c_header.py"),
    "edgepe/formats/c_sliced.py": ("tests/test_mut_c_sliced.py",),
    "edgepe/formats/onnx.py": ("tests/test_onnx_check_file.py", "tests/test_goldens.py"),
    "edgepe/formats/onnx_table.py": ("tests/test_onnx_table_split.py",
                                     "tests/test_verify_table_memory.py"),
    "edgepe/formats/pte.py": ("tests/test_mut_pte.py",),
    "edgepe/verify/__init__.py": ("tests/test_mut_verify.py",
                                  "tests/test_verify_past_limits.py"),
    "edgepe/verify/c_runner.py": ("tests/test_c_runner.py",),
    "edgepe/verify/cortex_m.py": ("tests/test_mut_cortex_m.py",),
    "edgepe/verify/report.py": ("tests/test_verify_render.py",),
    # test_mut_verify: the tflite interpreters verify picks and opens (issue 43)
    "edgepe/verify/runtimes.py": ("tests/test_mut_runtimes.py", "tests/test_mut_verify.py"),
    "edgepe/verify/sweep.py": ("tests/test_mut_sweep.py",),
    "edgepe/graft/__init__.py": ("tests/test_mut_graft.py", "tests/test_graft_entry.py",
                                 *_WHOLE),
    "edgepe/graft/find.py": ("tests/test_graft_find.py",),
    "edgepe/graft/find_hf.py": ("tests/test_mut_find_hf.py", "tests/test_graft_sincos_use.py",
                                *_WHOLE),
    "edgepe/graft/lower.py": ("tests/test_graft_lower.py", "tests/test_graft_lower_chosen.py"),
    "edgepe/graft/read.py": ("tests/test_graft_read_report.py",),
    "edgepe/graft/report.py": ("tests/test_graft_read_report.py",),
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
INT = "edgepe.graphs.integer.x_"
READ = "edgepe.graft.read.x_"
VREP = "edgepe.verify.report.x_"
FIND = "edgepe.graft.find.x_"
MT = "edgepe.graphs.model_tensors.x_"
BIN, INT8 = "edgepe.formats.bin.", "edgepe.graphs.int8.x_"  # h-m1's (bin has a class: Rows)
SWP, RTM, VER = "edgepe.verify.sweep.x_", "edgepe.verify.runtimes.", "edgepe.verify.x_"  # h-m4
SLI = "edgepe.graphs.sliced.x_"
CSL = "edgepe.formats.c_sliced.x_"
TRG = "edgepe.graphs.trig.x_"
PRV = "edgepe.graft.prove.x_"  # h-m2
SPL = "edgepe.graft.splice.x_"  # h-m2
LOW = "edgepe.graft.lower.x_"  # h-m2
TAB = "edgepe.graphs.table.x_"
QNT = "edgepe.graphs.quant.x_"
PTE = "edgepe.formats.pte.x_"
PTEM = "edgepe.formats.pte."  # methods: xǁClassǁmethod
CTX = "edgepe.verify.cortex_m.x_"
LWR, BTS = "edgepe.graphs.lowerings.x_", "edgepe.graphs.bits.x_"  # h-n2
CFM = "edgepe.formats.c.x_"  # h-n3
ONX, OTB = "edgepe.formats.onnx.x_", "edgepe.formats.onnx_table."  # h-n5 (OTB has a class)
TVL, RBD = "edgepe.graphs.table_values.x_", "edgepe.rebuild.x_"  # h-n5
GRF = "edgepe.graft.x_"  # h-n1: edgepe/graft/__init__.py
FHF = "edgepe.graft.find_hf.x_"  # h-n4
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
    # (loads' hooks for integers and numbers, issue 30, renumbered these: were 29, 32, 33)
    MAN + "loads__mutmut_53": "the type-name fallback for an empty message is unreachable "
    "(here its condition, str(None), is always true): json's errors and ours always carry a "
    "message (and nesting is bounded before parsing, so no RecursionError)",
    MAN + "loads__mutmut_50": "same unreachable fallback (its condition always true: every "
    "message is non-empty)",
    MAN + "loads__mutmut_54": "same unreachable fallback (type(None).__name__)",
    MAN + "read_embedded__mutmut_34": "encode('UTF-8'): codec names are case-insensitive",
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
    "edgepe.audit.x__elem_types__mutmut_5": "strict_mode=False dropped: False is "
    "infer_shapes' default (tests/test_graph_audit.py's wrong declared shape kills =True)",
    "edgepe.rebuild.x_rebuild__mutmut_47": "the version label replaced for a build that is not "
    "foreign too: not foreign means its edgepe_version is already this one, so the label is the "
    "same dict",
    **{f"{VCMP}xǁComparisonǁupdate__mutmut_{i}": "float('NAN') / float('INF'): float() "
       "reads its special values case-insensitively" for i in (29, 32, 36)},
    **{f"{VCMP}xǁComparisonǁupdate__mutmut_{i}": "astype(None) is astype(float64)"
       for i in (61, 63)},
    VCMP + "xǁToleranceǁallowed__mutmut_6": "astype(None) is astype(float64)",
    VCMP + "xǁComparisonǁupdate__mutmut_112": "the divisor where the expected value is 0 or "
    "not finite (1.0 -> 2.0): those quotients are replaced by 0 by the np.where around it",
    VCMP + "xǁComparisonǁ_keep_for_median__mutmut_7": "errors.size >= room: when the size "
    "equals the room the stride is ceil(size / room) = 1, the same whole chunk",
    # (renumbered by hmut4 after its fixes to check_tensor_bound and _check_sized_by_shapes:
    # the numbers recorded before had drifted by 2 since issue 41, so that several entries
    # named other mutants, one of them a real survivor: Range's made -= count)
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "zip's strict flag: the evaluator returns "
       "one value per name asked for, so strict never fires" for i in (98, 101, 108)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "reshape(1) or reshape(-2) (numpy reads any "
       "negative size as unknown) of a Range input: a scalar by ONNX's spec, one element either "
       "way" for i in (124, 125)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "reshape(None) or reshape(-2) of Expand's "
       "shape input: 1-D by ONNX's spec, kept as it is" for i in (163, 167)},
    UNT + "_check_sized_by_shapes__mutmut_136": "count 1 for an endless range: the endless test "
    "refuses it anyway, and the message says 'an endless range' then",
    UNT + "_check_sized_by_shapes__mutmut_175": "astype(None) is astype(float64)",
    UNT + "_check_sized_by_shapes__mutmut_24": "the list 'needed' is never read (the "
    "evaluated nodes are those in 'seen')",
    UNT + "_check_sized_by_shapes__mutmut_48": "the evaluated subgraph's ir_version left to "
    "make_model's default (the newest): the reference evaluator runs the same nodes",
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "the evaluated subgraph's name" for i in
       (59, 60)},
    **{f"{UNT}_check_sized_by_shapes__mutmut_{i}": "the feeds' dtype: inputs reach the "
       "evaluated nodes only through Shape and Size (a size computed from input values is "
       "refused before), so only their dimensions matter" for i in (88, 90)},
    UNT + "_check_sized_by_shapes__mutmut_102": "run(None, ...) returns every output of the "
    "subgraph, which are the names asked for, in the same (set) order",
    **{f"{UNT}check_tensor_bound__mutmut_{i}": "strict_mode / data_prop dropped: False is "
       "infer_shapes' default for both" for i in (29, 30)},
    UNT + "check_tensor_bound__mutmut_94": "break instead of continue after a Range or Expand "
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
    **{f"{BIAS}t5_bucket__mutmut_{i}": "the constant's dtype left to numpy: a Python int, or "
       "magnitude_buckets()'s int64 array, is int64 already (the goldens pin the bytes)"
       for i in (3, 49, 92, 102)},
    BIAS + "t5_bias__mutmut_43": "the bias table's dtype left to numpy: the module's float32 "
    "weight is float32 already",
    BIAS + "t5_bias__mutmut_25": "num_buckets / 2 as t5_bucket's later, stored as int64 "
    "(g.const) truncates to num_buckets // 2 (non-negative), odd counts included",
    BIAS + "_difference__mutmut_12": "np.asarray([-1], None) is int64, the dtype given",
    BIAS + "_difference__mutmut_15": "Unsqueeze of the rank-1 positions at axis +1 or -1: "
    "both make [N, 1]",
    BIAS + "alibi__mutmut_29": "reshape(-2, 1, 1): numpy takes any negative size as the one "
    "inferred, as -1",
    BIAS + "alibi__mutmut_50": "the slopes are float32 already: np.asarray(., None) keeps it",
    BIAS + "gaussian__mutmut_15": "2 sigma^2 is float32 already: np.asarray(., None) keeps it",
    BIAS + "gaussian__mutmut_50": "np.asarray([H, 1, 1], None) is int64, the dtype given",
    # lead: graphs/integer.py
    **{f"{INT}_affine_model__mutmut_{i}": "Graph.const's dtype None: np.asarray of a Python "
       "int list is int64 and of the module's float32 buffer float32, the dtypes given"
       for i in (15, 60, 79, 98)},
    INT + "_f32__mutmut_1": "astype(None) makes float64, which Graph.const casts back to "
    "float32 exactly (every float32 is a float64)",
    # lead: graphs/table_values.py
    **{f"edgepe.graphs.table_values.x_table_reference__mutmut_{i}": "the dtype of the positions "
       "handed to the reference module: every scheme's encode casts them itself (to float32, or "
       "int64 for bit schemes), so int64 and the caller's integer dtype give the same rows"
       for i in (23, 25, 38, 40)},
    **{f"edgepe.graphs.table_values.x_bias_rows__mutmut_{i}": "one operand of t - u left in the "
       "caller's dtype: the other is int64, so the difference is int64 for any signed integer "
       "input (tests/test_table_values.py feeds int32 and int64); only a uint64 position past "
       "2^63, which no caller passes, would differ" for i in (12, 14, 24, 26)},
    # lead: verify/report.py
    **{f"{VREP}_num__mutmut_{i}": "f'{0.0:.3g}' is '0' and f'{1.0:.3g}' is '1': the special "
       "case prints what the format prints (errors are absolute values, never -0.0)"
       for i in (1, 5)},
    **{f"{VREP}render__mutmut_{i}": "an empty cell given as None: rich renders None as an "
       "empty cell" for i in (*range(115, 123), *range(145, 153), *range(189, 195), 196)},
    **{f"{VREP}render__mutmut_{i}": "justify None or an unknown word (XXleftXX, LEFT): rich "
       "renders it as 'left', no padding before the text (the tests pin each title and cell "
       "by position)" for i in (36, 38, 43, 44, 47, 48, 90, 91)},
    **{f"{VREP}render__mutmut_{i}": "the word 'ok' of a sha256 that matched: the row prints "
       "`sha` only when it did not (FAIL (MISMATCH))" for i in (93, 95, 96)},
    # lead: graft/find.py
    **{f"{FIND}_table_read__mutmut_{i}": "the padding of Slice's absent inputs: a padded name "
       "('XXXX', or one more) names no constant, as '' does, so the default (axes 0, step 1) "
       "applies the same" for i in (48, 49, 50, 51)},
    FIND + "_table_read__mutmut_54": "consts.get('') for an absent input: ONNX names no tensor "
    "'' (the empty name means absent), so it is None as the guard makes it",
    **{f"{FIND}{fn}__mutmut_{i}": "graph given as None beside graph_index's makers: "
       "_trace_length reads graph only to build makers when none is given, and every caller "
       "gives them" for fn, i in (("_table_read", 36), ("_table_read", 83), ("detect", 62))},
    FIND + "build_detected__mutmut_16": "the module's seed: it draws only the projection, which "
    "is overwritten with the model's weight at once",
    **{f"{FIND}build_detected__mutmut_{i}": "the name parse_model gives the artifact just built: "
       "its refusals cannot happen for edgepe's own bytes" for i in (40, 43, 44)},
    FIND + "detect__mutmut_4": "', '.join vs 'XX, XX'.join of DETECTABLE: it has one entry, "
    "so no separator is printed",
    # lead: graphs/model_tensors.py
    **{f"{MT}_rows__mutmut_{i}": "Gather's axis given as None or left out: onnx.helper omits "
       "it and Gather's default axis is 0" for i in (29, 33, 60, 64)},
    MT + "_rows__mutmut_3": "the name of the duplicated Gather's output: the Concat reads it by "
    "whatever name it has and its own output is renamed to the table's",
    **{f"{MT}{fn}__mutmut_{i}": "np.asarray(int, None) is int64, the dtype given"
       for fn, i in (("alibi_distance_bias", 10), ("alibi_distance_bias", 12),
                     ("alibi_distance_bias", 22), ("alibi_distance_bias", 24),
                     ("alibi_distance_bias", 33), ("alibi_distance_bias", 35),
                     ("gathered_tables", 42), ("gathered_tables", 44))},
    **{f"{MT}{fn}__mutmut_{i}": "the graph's name: graft splices the PE's nodes, initializers "
       "and outputs (graft/splice.py), never its name" for fn, i in (
           ("alibi_bias", 49), ("alibi_bias", 50), ("alibi_distance_bias", 116),
           ("alibi_distance_bias", 117), ("gathered_tables", 154), ("gathered_tables", 155))},
    **{f"{MT}{fn}__mutmut_{i}": "full_check=False or left out: the model is valid, so the "
       "checker passes either way (a model it refuses is never built here)" for fn, i in (
           ("alibi_bias", 92), ("alibi_bias", 93), ("alibi_distance_bias", 141),
           ("alibi_distance_bias", 142), ("gathered_tables", 170), ("gathered_tables", 171))},
    **{f"{MT}gathered_tables__mutmut_{i}": "the default quantize word: _rows tests for 'int8' "
       "only, so any other word stores float32 as 'none' does" for i in (3, 4)},
    **{f"{MT}gathered_tables__mutmut_{i}": "the suffix of the second set's table names: "
       "intermediate names the outputs never show" for i in (72, 73)},
    **{f"{MT}int8_tables__mutmut_{i}": "the clip to +-127 (or +-128, or none): with scale = "
       "max|t| / 127, rint(t / scale) is already within +-127" for i in (17, 18, 27, 28)},
    **{f"{MT}{fn}__mutmut_{i}": "astype(None) is astype(float64)" for fn, i in (
        ("int8_tables", 24), ("recipe_distance", 32), ("recipe_distance", 33),
        ("recipe_distance", 38), ("recipe_distance", 44))},
    **{f"{MT}recipe_distance__mutmut_{i}": "the chunks overlap or start at 1 instead of 0: the "
       "max over positions is the same (position 0's error is 0: cos 0 = 1, sin 0 = 0)"
       for i in (14, 15, 20)},
    **{f"{MT}sliced_rope__mutmut_{i}": "a name that no output shows (the Graph's or the "
       "graph's name, the squeeze axes constant's) or its int64 dtype left to numpy"
       for i in (12, 13, 14, 127, 128, 38, 39, 42, 45, 46)},
    **{f"{MT}sliced_rope__mutmut_{i}": "full_check=False or left out: the model is valid, so "
       "the checker passes either way" for i in (143, 144)},
    **{f"{MT}sliced_rope__mutmut_{i}": "zip's strict flag: the two halves and the two names "
       "always pair" for i in (78, 81, 82)},
    MT + "sliced_rope__mutmut_48": "a scale of ones when the attention factor is 1: each value "
    "times 1.0 is itself",
    **{f"{MT}sliced_rope__mutmut_{i}": "the dtype of the attention scale or of inv_freq left to "
       "numpy: graphs.sliced stores both as float32 constants (g.const casts)"
       for i in (54, 57, 70, 72, 74)},
    MT + "recipe_distance__mutmut_41": "max's initial dropped: a chunk always holds a row "
    "(start < max_len), so the max is of a non-empty array",
    MT + "recipe_distance__mutmut_43": "max's initial None: a chunk always holds a row "
    "(start < max_len), so the max is of a non-empty array",
    **{f"{MT}recipe_distance__mutmut_{i}": "astype(None) is astype(float64), the dtype given"
       for i in (34, 35, 40, 46)},
    MT + "recipe_distance__mutmut_16": "range's step dropped: a chunk starts at every position, "
    "each row still compared (the max over overlapping chunks is the same max)",
    MT + "recipe_distance__mutmut_17": "chunks from position 1: position 0's angle is 0 * w = 0, "
    "exact in float32, so its gap is 0 in every recipe and cannot raise the max",
    MT + "recipe_distance__mutmut_22": "every chunk from position 0: a superset of the chunk's "
    "rows, the same max",
    # lead: formats/onnx.py
    **{f"edgepe.formats.onnx.x_check_file__mutmut_{i}": "the 'ai.onnx' spelling of the default "
       "domain: check_untrusted, just before, refuses any node in it (edgepe writes ''), so "
       "none reaches this set" for i in (48, 49)},
    **{f"edgepe.formats.onnx.x__int8_builder__mutmut_{i}": "the refusal when edgepe.graphs.int8 "
       "cannot be imported: it is part of this package, so the import never fails"
       for i in range(1, 7)},
    # lead: verify/c_runner.py
    **{f"edgepe.verify.c_runner.x_{fn}__mutmut_{i}": "the name of a temporary folder or of the "
       "positions file inside it: a name no reader depends on" for fn, i in (
           ("run_c_header", 1), ("run_c_header", 2), ("run_c_header", 3), ("run_program", 46),
           ("run_program", 47), ("run_program", 48), ("run_program", 54), ("run_program", 55))},
    "edgepe.verify.c_runner.x_run_program__mutmut_4": "'XXiuXX' still holds the kinds 'i' and "
    "'u' (and no other dtype kind is X)",
    **{f"edgepe.verify.c_runner.x_run_program__mutmut_{i}": "np.array of Python floats is "
       "float64, the dtype given" for i in (83, 85)},
    **{f"edgepe.verify.c_runner.x_run_program__mutmut_{i}": "the printed integers kept as "
       "strings: astype to the result dtype parses the same decimal text" for i in (89, 91)},
    **{f"edgepe.formats.onnx.x_check_options__mutmut_{i}": "COMPUTE.get's default for a "
       "scheme with no compute graph: such a scheme has no compute mode, refused just above "
       "(a table graph has no bitwise ops)" for i in (58, 60, 61)},
    "edgepe.formats.onnx.x_check_file__mutmut_4": "the fallback for an exception with an empty "
    "message: onnx's and protobuf's errors always carry one",
    # lead: graphs/_common.py
    **{f"edgepe.graphs._common.x_clamp_int64__mutmut_{i}": "np.asarray of a Python int bound "
       "is int64, the dtype given" for i in (3, 10)},
    **{f"edgepe.graphs._common.x_make_model__mutmut_{i}": "full_check=False or left out: "
       "every builder's model is valid (the goldens run each), so the checker passes either "
       "way" for i in (68, 69)},
    # lead: graphs/quant.py (rerun with one OpenMP thread)
    **{f"edgepe.graphs.quant.x_quantize__mutmut_{i}": "one operand of x / scale left in its own "
       "float dtype: the other is float64, so the division is float64 of the same values"
       for i in (5, 7, 9, 11)},
    **{f"edgepe.graphs.quant.x_{fn}__mutmut_{i}": "astype(None) is astype(float64)"
       for fn, i in (("absmax", 21), ("measure_table", 25), ("measure_table", 30),
                     ("scales", 13), ("half_scales", 27))},
    # lead: graphs/quant.py (survivors of the rerun, tests/test_mut_quant.py)
    QNT + "absmax__mutmut_23": "reshape with -2 for the row axis: numpy takes any negative size "
    "as the one inferred, as -1",
    **{f"{QNT}{fn}__mutmut_{i}": "the peak's dtype left to numpy: every caller passes absmax's "
       "float64 peaks, so m / 127 is the same float64" for fn, i in (("scales", 4), ("scales", 6))},
    **{f"{QNT}half_scales__mutmut_{i}": "the peak's dtype left to numpy: callers pass float64 "
       "peaks; and a float32 peak gives the same scales: 127 h is exact in float32 for a float16 "
       "h and its float32 neighbours are >= 64 ulp(h) away, beyond the 63.5 ulp(h) that would "
       "round m / 127 onto h from above, so the smallest float16 >= m / 127 is the same"
       for i in (4, 6)},
    QNT + "half_scales__mutmut_30": "astype(None) is astype(float64)",
    QNT + "measure_table__mutmut_16": "cols starts at 1 instead of 0: it is overwritten by the "
    "first chunk, and a table has at least one row (iter_table yields >= 1 chunk)",
    QNT + "measure_table__mutmut_37": "max(initial=None) instead of 0.0: differs only on an empty "
    "chunk, which iter_table never yields (its chunks hold 1 to CHUNK_ROWS rows)",
    **{f"{QNT}quant_section__mutmut_{i}": "the per-tensor scale is a [1] array: reshape(None), "
       "reshape(1) and reshape(-2) give its one element at [0] as reshape(-1) does"
       for i in (31, 32, 33)},
    **{f"{QNT}quant_section__mutmut_{i}": "the bound's dtype left to numpy: a float32 or float64 "
       "bound gives the same float() of each element and of the max" for i in (7, 9)},
    # lead: formats/pte.py (tests/test_mut_pte.py)
    **{f"{PTE}_projection_quant__mutmut_{i}": "a dtype or shape argument that changes nothing: "
       "np.arange's default integer is int64, q is int8 and scale float32 (or float16, whose "
       "values float32 holds) already, a 1-D scale reshaped by None, 1 or -2 is itself"
       for i in (31, 33, 35, 37, 38, 40, 42, 44)},
    **{f"{PTE}_lower__mutmut_{i}": "the program's bytes are identical (checked for binary and "
       "alibi at L = 8): an example of 3 positions instead of 2, a Dim's lower bound 2, 0 or "
       "left out, its name, strict=False: the dynamic range and the traced graph are the same"
       for i in (15, 17, 25, 31, 34, 36, 37, 38, 44, 47, 49, 50, 51, 62, 66, 67)},
    PTE + "_lower__mutmut_55": "every warning ignored inside the export instead of torch's "
    "FutureWarning only: tracing these modules raises no other warning",
    PTE + "_to_executorch__mutmut_29": "an operator without an overload would be listed as "
    "'name.': every operator of these programs is an out variant with an overload",
    PTE + "require_executorch__mutmut_10": "importlib.metadata normalises distribution names "
    "(case-insensitive): version('EXECUTORCH') is executorch's version",
    PTEM + "xǁProgramǁ__init____mutmut_42": "InternalConsistency is load_program's default "
    "verification in executorch 1.5.1, the one pinned (so the explicit argument guards a change "
    "of default)",
    PTE + "_projection_quant__mutmut_18": "pop without a default: projection_quant's section "
    "always holds the three graph-only keys, so none is missing",
    **{f"{PTE}check_file__mutmut_{i}": "reading more than 8 bytes (all, or 9): the checks look "
       "at bytes 4..8 only, and head[6:9] of 8 bytes is head[6:8]" for i in (5, 6, 18)},
    PTE + "describe_program__mutmut_20": "an operator without an overload would print as "
    "'name.': every operator of these programs is an out variant with an overload",
    **{f"{PTE}describe_program__mutmut_{i}": "the fallback for an exception with an empty "
       "message: the flatbuffer parser's errors always carry one" for i in (4, 6)},
    **{f"{PTEM}xǁProgramǁ__init____mutmut_{i}": "the fallback for an exception with an empty "
       "message: ExecuTorch's load errors always carry one" for i in (47, 48, 50)},
    PTEM + "xǁProgramǁ_call__mutmut_12": "/dev/null opened for reading: the runtime's writes to "
    "fd 2 then fail instead of being discarded; nothing reaches stderr either way",
    PTEM + "xǁProgramǁ_call__mutmut_19": "fd 3 silenced instead of 2: on x86-64 (here and CI) the "
    "runtime's first call logs nothing to fd 2 (its probe is for an Arm CPU id), so the "
    "difference cannot be seen; the test pins that fd 2 is restored",
    **{f"{PTEM}xǁProgramǁrun__mutmut_{i}": "the default empty keys in float64: np.asarray(..., "
       "int64) converts them" for i in (20, 22)},
    **{f"{PTEM}xǁ_Tableǁ__init____mutmut_{i}": "torch.tensor of a Python int is int64 by default, "
       "the dtype given" for i in (85, 87)},
    PTEM + "xǁ_Tableǁ__init____mutmut_94": "the column mask left bool: multiplied into the "
    "gathered values, torch promotes it to the table's dtype, the same 0/1",
    # lead: verify/cortex_m.py (tests/test_mut_cortex_m.py)
    **{f"{CTX}_main_source__mutmut_{i}": "INT64_MIN written as INT64_C(-9223372036854775808): "
       "gcc reads the literal as unsigned 2^63, negated and converted to int64_t it is INT64_MIN "
       "(a warning in the harness, which is not built with -Werror): the same record"
       for i in (21, 24, 26, 27)},
    **{f"{CTX}_map_costs__mutmut_{i}": "GNU ld's map has each heading once, and its discarded-"
       "sections and memory-configuration blocks hold no line pair of the member form (a name "
       "at column 0, then an indented 'file (symbol)'): cutting them off, or not, or from the "
       "right, reads the same members" for i in (3, 9, 17, 18, 19, 21, 22, 23)},
    CTX + "_pe_source__mutmut_1": "the default of codes: run_header, its one caller, always "
    "passes it",
    **{f"{CTX}_pe_source__mutmut_{i}": "which scale the timed pe_row of an int8 table multiplies "
       "by (scale[k] or scale[0]): tables are read back raw through pe_raw, and the load is one "
       "instruction either way" for i in (69, 70, 75)},
    **{f"{CTX}_pe_source__mutmut_{i}": "the (float) cast of a stored value assigned to float "
       "out[k]: C converts it on assignment anyway, the same code" for i in (78, 79, 81, 82, 83)},
    **{f"{CTX}run_header__mutmut_{i}": "a code-generation flag that changes no byte counted "
       "here with gcc 12 at -Os: without -fdata-sections the arrays sit in pe.o's .rodata, "
       "counted the same; these row loops are not turned into memcpy calls, freestanding or "
       "not (tests/test_mut_cortex_m.py pins flash to nm's sizes)" for i in (102, 104, 106)},
    CTX + "run_header__mutmut_214": "libc left out of the link: no header edgepe writes, nor "
    "the harness, calls into it (every program here links without it)",
    CTX + "run_header__mutmut_17": "'i' and 'u' are in 'XXiuXX' too: the same integer kinds pass",
    CTX + "run_header__mutmut_59": "table rows as float64: printed as 3.0 into a uint32_t "
    "initializer, which C converts to the same row (rows are small integers)",
    CTX + "run_header__mutmut_67": "rows clipped to the table's length + 1 instead of - 1: the "
    "harness's pe_raw clamps to ROWS - 1 again, so the same row is read",
    **{f"{CTX}run_header__mutmut_{i}": "the temporary folder's name prefix" for i in (107, 108,
                                                                                     109)},
    **{f"{CTX}run_header__mutmut_{i}": "the harness's compile step name: main.c and startup.c "
       "are edgepe's own and never include the header, so no input makes that step fail"
       for i in (169, 183, 184)},
    CTX + "run_header__mutmut_233": "ram = stack only instead of + static: the header's arrays "
    "are const (flash), so pe.o's static RAM is 0 for every header edgepe writes",
    **{f"{CTX}run_header__mutmut_{i}": "QEMU's chardev creates out.txt when it starts, before "
       "any instruction runs: the file is always there" for i in (290, 294)},
    **{f"{CTX}run_header__mutmut_{i}": "errors= of read_text: the program writes ASCII (hex "
       "and markers) only" for i in (291, 292, 293)},
    CTX + "run_header__mutmut_303": "300 or 301 characters of the failure's output: the "
    "excerpt is shorter than both in every failure a test stages",
    **{f"{CTX}run_header__mutmut_{i}": "the markers appear once each, EDGEPE-BEGIN first: "
       "splitting on whitespace, from the right or with any maxsplit finds the same rows"
       for i in (308, 309, 310, 313, 314, 317, 321)},
    **{f"{CTX}run_header__mutmut_{i}": "the count check of the printed rows: the harness prints "
       "one hex row a probe of width x value bytes, so it fires only on a broken harness, "
       "which no input makes" for i in (334, 341)},
    **{f"{CTX}run_header__mutmut_{i}": "'<f4' and 'f4' (or '<i2', 'i2') are the same dtype on a "
       "little-endian host" for i in (373, 374, 375)},
    # lead: graft/read.py
    READ + "_all_initializers__mutmut_5": "an unset attribute graph is an empty GraphProto: "
    "walking it yields no initializer",
    **{f"{READ}_bounded_bytes__mutmut_{i}": "read(None) or read(limit + 2) instead of "
       "read(limit + 1): the size was refused above the limit just before; they differ only "
       "for a file growing in between (memory, not the result)" for i in (20, 22)},
    **{f"{READ}_inline_external__mutmut_{i}": "the error handler (dropped, unknown, upper "
       "case) or codec spelling of the location's encode: _check_external refused any entry "
       "protobuf could not decode as UTF-8, so the location is valid UTF-8 text, which holds "
       "no lone surrogate for a handler to see, and 'UTF-8' is 'utf-8'" for i in (33, 35, 36, 37)},
    READ + "_inline_external__mutmut_63": "the size of a target that is not a regular file: "
    "it is refused as not a regular file before the size is read",
    **{f"{READ}parse_model__mutmut_{i}": "the fallback for an exception with an empty message: "
       "protobuf's DecodeError and onnx's errors always carry one (its text is pinned by "
       "tests/test_graft_read_report.py)" for i in (5, 8, 9)},
    # lead: graphs/table.py
    **{f"{TAB}{fn}__mutmut_{i}": "g.const of int64 values with dtype None: np.asarray of Python "
       "ints (or of an int64 array) is int64, the dtype given"
       for fn, i in (("_bias_row", 45), ("_bias_row", 65), ("build", 140), ("build", 165))},
    TAB + "build__mutmut_18": "g.const(table, None): both callers pass the table in the output "
    "dtype already (stored_table's np.empty, streamed's stand-in), so it is stored as is",
    **{f"{TAB}stored_table__mutmut_{i}": "a float64 table (dtype None or left out) is cast to the "
       "output dtype by g.const: float32 values widened exactly, then one rounding, the same as "
       "one direct rounding" for i in (4, 6)},
    **{f"{TAB}streamed__mutmut_{i}": "the stand-in table is deleted from the model right after "
       "build: its module, rows, dtype (g.const casts it) or absence (build then computes the "
       "real table) change nothing kept" for i in (10, 12, 16, 18, 20, 21)},
    TAB + "_clip__mutmut_1": "at high = 2^24 exactly both forms are exact (2^24 is a float32): "
    "the graph differs only for a table of 2^24 + 1 rows (no golden that size), its output not "
    "(tests/test_table_graph.py runs both forms at 2^24)",
    TAB + "build__mutmut_197": "g.const(inside, None): inside is a numpy bool array, stored as "
    "bool either way",
    TAB + "_clip__mutmut_6": "the stem names the two bound initializers of the one int64 clamp "
    "in a table graph: any stem gives the same graph function (no golden has 2^24 + 2 rows)",
    TAB + "_columns__mutmut_13": "column / 2 instead of // 2: the float shift s + 0.5 is "
    "truncated to s by the int64 g.const of the index, and s + 0.5 < width iff s < width for "
    "integers s and width",
    # h-m1: formats/bin.py, graphs/int8.py
    **{f"{BIN}x_dequantise__mutmut_{i}": "the dtype of np.asarray of the manifest's scale or zero "
       "point left to numpy: JSON numbers give float64 (or int64), and either times or minus the "
       "float64 values is float64 with the same values" for i in (15, 17, 22, 24)},
    BIN + "x_dequantise__mutmut_62": "astype(None) is astype(float64)",
    BIN + "x_dequantise__mutmut_43": "reshape with -2 for the channel axis: numpy takes any "
    "negative size as the one inferred, as -1",
    BIN + "x_dequantise__mutmut_58": "a scalar zero point reshaped to [1, ..., 1] (one element) "
    "broadcasts as the scalar",
    BIN + "x_check_file__mutmut_15": "the itemsize given for a bit table: data_size ignores it "
    "there (ceil(rows * cols / 8))",
    BIN + "x_pack_bits__mutmut_12": "reshape(-2): numpy takes any negative size as the one "
    "inferred, as -1",
    **{f"{BIN}x_stored_chunks__mutmut_{i}": "'bit' or 'uint8' misspelt: that dtype takes the other "
       "branch, astype(NUMPY_DTYPES[dtype]) = astype('|u1'), the same bytes; only the assert "
       "that a bit scheme's entries are 0/1 is skipped, and bit schemes' tables are exactly 0/1 "
       "(tests/test_mut_bin.py compares them with encode's)" for i in (11, 12, 13, 14)},
    **{f"{BIN}xǁRowsǁrows__mutmut_{i}": "a bit row span read with 2 * (first // 8) (or "
       "first // 8 - first // 9) bytes more than it needs: the bits past the span are sliced "
       "off, so the rows are the same (a few bytes more read)" for i in (13, 19)},
    # graphs/int8.py: numpy's default dtypes, g.const's cast, branches no int8 graph reaches
    **{f"{INT8}_clamp_inputs__mutmut_{i}": "np.array of a Python int with no dtype is int64 "
       "(numpy 2, Linux), the dtype given" for i in (14, 16, 24, 26)},
    **{f"{INT8}_float_model__mutmut_{i}": "quantize left int8 (or misspelt) in the float "
       "builder's config: the builders int8 calls never read config.quantize (only graphs/"
       "sliced.py's binary builder does, and build_int8 refuses binary --mode sliced first)"
       for i in (3, 5, 6, 7)},
    **{f"{INT8}_int8_gathers__mutmut_{i}": "fold with whole starting False: every node then "
       "takes the else branch, and the float table graph's Gather reads the table, so whole is "
       "True after the loop (the same dequantise in front)" for i in (58, 60, 61)},
    INT8 + "_output_range__mutmut_37": "2 << n patterns: positions 2^n .. 2^(n+1) - 1 wrap "
    "to the same 2^n bit patterns, so the same peak",
    INT8 + "_output_range__mutmut_57": "range step 1: overlapping chunks of the same 2^n rows, "
    "the same peak (more work only)",
    INT8 + "_output_range__mutmut_58": "the wrapped patterns from 1, not 0: binary-smooth (the "
    "one quantised-output scheme that wraps) gives column k hi or lo by bit k alone; every lo "
    "of row 0 recurs in row 2^n - 1 - 2^k for n >= 2, and for n = 1 the peak is row 1's "
    "|hi| >= |lo|",
    **{f"{INT8}_output_range__mutmut_{i}": "absmax's granularity defaults to 'channel'"
       for i in (6, 62)},
    **{f"{INT8}_projection__mutmut_{i}": "g.const(x, None, ...): np.asarray keeps x's dtype, "
       "already the one given (q and the zero point int8, the scales float32 or float16, "
       "mask_inverse float32)" for i in (88, 97, 125, 148, 169, 188, 200, 214, 245)},
    **{f"{INT8}_projection__mutmut_{i}": "np.zeros(n) in float64 for the zero point: g.const "
       "casts it to the int8 given" for i in (103, 105)},
    INT8 + "_projection__mutmut_219": "half.reshape(None) keeps its [d] shape, the one asked "
    "for: float16 scales are per channel only (one scale never pays for its Cast)",
    **{f"{INT8}_projection__mutmut_{i}": "projection_quant's summation other than 'int32' is "
       "the float32 sum (exact = summation == 'int32')" for i in (8, 14, 15)},
    INT8 + "_projection__mutmut_20": "fold never reads rows or masked (only live_node does)",
    INT8 + "_projection__mutmut_264": "module None to _mask_projection_model: it hands module "
    "only to _bits_model (the shift form), which does not read it",
    **{f"{INT8}_projection__mutmut_{i}": "held (the int8 RAM) is what runtime_section reports "
       "for live only; fold reports 4 q.size, its first argument" for i in (26, 27, 28)},
    **{f"{INT8}_projection__mutmut_{i}": "the row scales in float64 (astype(None)) or masked "
       "astype(None): the same float32 values; every use casts them to float32 (dequantize, "
       "g.const), and times 2^-k is exact either way" for i in (30, 53)},
    INT8 + "_projection__mutmut_35": "scale.reshape(None) keeps the 1-D scale's shape",
    INT8 + "_projection__mutmut_37": "reshape(-2): numpy takes any negative size as the one "
    "inferred, as -1",
    INT8 + "_quantised_output__mutmut_109": "reshape(-2, 1, 1): numpy takes any negative size "
    "as the one inferred, as -1",
    INT8 + "_quantised_output__mutmut_254": "astype(None) is astype(float64)",
    INT8 + "_quantised_output__mutmut_64": "the message of a refusal no builder reaches (every "
    "float graph has one output)",
    INT8 + "_quantised_output__mutmut_78": "_clamp_inputs reads config only when high is not "
    "given; the bias clamp gives both bounds",
    **{f"{INT8}_rebuild__mutmut_{i}": "the float graphs int8 builds on declare only the default "
       "domain (com.microsoft is in rope's apply graphs, which build_int8 refuses), so extra is "
       "{} and no extra opset is passed either way" for i in (2, 5, 6, 14, 22, 24)},
    **{f"{INT8}_replay_projection__mutmut_{i}": "np.arange of Python ints is int64, the dtype "
       "given" for i in (4, 6, 19, 22)},
    **{f"{INT8}_replay_projection__mutmut_{i}": "bits @ q in float64 (astype(None)) is exact "
       "(|sum| <= 127 n), the same integers as int32's, cast to float32 the same"
       for i in (8, 31)},
    INT8 + "_replay_projection__mutmut_41": "max(initial=None) of a non-empty chunk: the same "
    "max",
    INT8 + "_replay_projection__mutmut_44": "astype(None) is astype(float64)",
    INT8 + "_residual__mutmut_3": "the float32 residual in float64 (astype(None)): the same "
    "values; quantize works in float64 and dequantize casts to float32 anyway",
    **{f"{INT8}_residual__mutmut_{i}": "torch.arange of an int defaults to int64, the dtype "
       "given" for i in (33, 35)},
    **{f"{INT8}_residual__mutmut_{i}": "astype(None) is astype(float64)" for i in (48, 51)},
    **{f"{INT8}_residual__mutmut_{i}": "the rtol terms of the residual bound: _residual is "
       "sinusoidal-learned's alone, whose spec rtol is 0 (tests/test_mut_int8.py asserts it), "
       "so rtol (1 + m) is 0 whatever its form" for i in (55, 56, 57, 58)},
    **{f"{INT8}_weight__mutmut_{i}": "the float32 weights in float64 (astype(None)): the same "
       "values; only their max and round(w / s), taken in float64 anyway, are used"
       for i in (4, 5)},
    INT8 + "max_popcount__mutmut_9": "the floor 0 dropped: bin(m).count('1') is never negative",
    INT8 + "projection_quant__mutmut_132": "scale[:, None] of a one-element scale: the same "
    "broadcast",
    INT8 + "projection_quant__mutmut_33": "the float16 scales in float64 (astype(None)): the same "
    "values; every use casts to float64 or float32",
    INT8 + "projection_quant__mutmut_64": "astype(None) is astype(float64)",
    # h-m4: verify/sweep.py, verify/runtimes.py, verify/__init__.py, verify/cortex_m.py
    **{f"{SWP}_bias_chunks__mutmut_{i}": "dtype=np.int64 dropped or None: numpy's default "
       "integer for np.arange / np.asarray of Python ints is int64 on 64-bit Linux (and "
       "everywhere from numpy 2), the dtype given" for i in (4, 6, 34, 37, 64, 66, 77, 80)},
    SWP + "_bias_chunks__mutmut_22": "max(2, heads * stop): heads * stop < 2 only for one head "
    "and max_len 1, where the one query is one chunk whatever the step",
    **{f"{SWP}in_range_total__mutmut_{i}": "the SWEEP_FULL test is a shortcut: "
       "sampled_positions(n) is arange(n) up to SWEEP_FULL, so len() of it is n either way"
       for i in (22, 24)},
    SWP + "in_range_total__mutmut_32": "stop >= SWEEP_FULL: at stop == SWEEP_FULL = 2^24, "
    "len(sampled_positions(stop)) is stop, and so is the count below it (a multi-index grid of "
    "2^24 per coordinate is past GRID_LIMIT = 2^16)",
    **{f"{SWP}in_range_total__mutmut_{i}": "the kind test after 'arity is not None': no bias "
       "scheme has an arity (alibi and gaussian take [N] positions)" for i in (36, 37)},
    **{f"{SWP}{fn}__mutmut_{i}": "np.arange of Python ints without dtype is int64 (numpy's "
       "default integer on 64-bit Linux, and everywhere from numpy 2), the dtype given"
       for fn, i in (("sampled_positions", 3), ("sampled_positions", 5),
                     ("sampled_positions", 9), ("sampled_positions", 12),
                     ("_apply_chunks", 28), ("_apply_chunks", 31), ("_multi_chunks", 10),
                     ("_multi_chunks", 12), ("_multi_chunks", 39), ("_multi_chunks", 41),
                     ("encoded_rows", 4), ("encoded_rows", 7))},
    SWP + "_apply_chunks__mutmut_49": "17 quick probe values: the 17th seeded one (about "
    "2.3e16) is past the limit of every rope apply graph (|p| <= 2^24), so it is filtered out "
    "(and the first 16 keep their signs)",
    SWP + "_reference__mutmut_28": ".to(None) keeps the dtype: encode and table_reference "
    "return float32 already",
    **{f"{SWP}onnx_chunks__mutmut_{i}": "np.arange of Python ints without dtype is int64 "
       "(numpy's default integer on 64-bit Linux), the dtype given" for i in (123, 126)},
    SWP + "position_spans__mutmut_36": "max(1, ...): a span moves from 0 to 1 only when 2^k <= "
    "width // 2, and the position width it adds is covered by the next power of two's span "
    "(which starts at 2^k' - width // 2 <= width // 2)",
    SWP + "probe_values__mutmut_108": "int(m) / +-1 instead of *: m is a float64, so the "
    "quotient is the same integer-valued float, converted exactly by the final int64 asarray",
    **{f"{SWP}probe_values__mutmut_{i}": "zip's strict flag: magnitude and sign both have count "
       "values" for i in (120, 123, 124)},
    **{f"{SWP}probe_values__mutmut_{i}": "0 is never a candidate (no fixed value is 0; a random "
       "one is at least 1 in magnitude), so 0 <= v and 0 < v (or 1 <= v) filter alike"
       for i in (129, 130)},
    SWP + "probe_values__mutmut_135": "abs(v) < limit: the values dropped (+-limit) are added "
    "back by the next line when outside the range",
    SWP + "probe_values__mutmut_143": "limit == max_len counted as in range: max_len and -max_len "
    "are fixed probe values, already kept within |v| <= limit",
    SWP + "probe_values__mutmut_89": "astype(None) is astype(float64)",
    SWP + "single_positions__mutmut_23": "stop > 1: for stop == 1 the seeded picks are all 0, "
    "already a fixed single",
    SWP + "single_positions__mutmut_7": "stop / 2: int() truncates it to stop // 2 (stop >= 0)",
    SWP + "sampled_positions__mutmut_1": "stop < SWEEP_FULL: at stop == SWEEP_FULL "
    "position_spans covers every position too, so the concatenation is arange(stop)",
    SWP + "encoded_rows__mutmut_19": "+distance: the keys of the rows behind are then negative; "
    "every registered bias scheme (alibi, gaussian) is a function of |q - k|, the same value",
    **{f"{SWP}encoded_rows__mutmut_{i}": "a float32 zero instead of int64: the bias schemes "
       "compute q - k in float32 anyway, the same values" for i in (24, 26)},
    SWP + "encoded_rows__mutmut_27": "two zero positions: the second row (or column) is computed "
    "and dropped by [:, 0, :] / [:, :, 0]",
    SWP + "encoded_rows__mutmut_61": "binary-2d's odd columns (y's bits): every coordinate is "
    "set to p, so y's bits are x's",
    SWP + "encoded_rows__mutmut_78": ".to(None) keeps the dtype: encode returns float32 already",
    **{f"{VER}_as_stored__mutmut_{i}": "np.asarray of a list of floats is float64, the dtype "
       "given" for i in (29, 31)},
    VER + "_as_stored__mutmut_47": "reshape to -2: numpy takes any negative size as the one "
    "inferred, as -1",
    **{f"{VER}_audit_placement__mutmut_{i}": "get's default None instead of {}: both are falsy, "
       "the same note" for i in (7, 9)},
    VER + "_verify_on__mutmut_97": "getattr's default: every runtime class has a placement "
    "attribute (OrtRuntime, RefRuntime, OpenVinoRuntime, FileRuntime, CRuntime, pte.Program)",
    VER + "_verify_on__mutmut_108": "the default close's return value is discarded",
    # hmut2: issue 44's _past_kernel_limits and issue 43's tflite branch
    VER + "_past_kernel_limits__mutmut_28": "max(2, size) for max(1, size): they differ for a "
    "row of size <= 1, where 131071 * 2 is far below 2**27 either way (the call runs)",
    VER + "_past_kernel_limits__mutmut_30": ">= for >: 131071 (odd) times a row size is never "
    "2**27",
    VER + "_check_file__mutmut_22": "formats.tflite.check_file reads the file alone: its manifest "
    "argument is unused (the file is checked as a TFLite model whatever the manifest says)",
    **{f"{RTM}x_resolve_runtimes__mutmut_{i}": "the 'ov' line is redundant for ONNX: ALIASES "
       "maps ov to OpenVINOExecutionProvider, whose short name is openvino; elsewhere the "
       "refusal names the raw name either way" for i in (11, 12)},
    **{f"{RTM}x_resolve_runtimes__mutmut_{i}": "the stem match of the provider search: a stem "
       "differs from its provider's short name only for aliased providers (trt, whose stem "
       "tensorrt is an alias too), so it never changes the key" for i in (29, 30, 31, 32)},
    **{f"{RTM}xǁOrtRuntimeǁ__init____mutmut_{i}": "the search after ALIASES.get(name): every "
       "provider installed here (CPU) has an alias, so the search is never evaluated, or finds "
       "the same provider" for i in (4, 5, 6, 7, 8)},
    **{f"{RTM}xǁOrtRuntimeǁ__init____mutmut_{i}": "onnxruntime's log level 4 (fatal) instead of "
       "3 (error): a session on a graph edgepe checked logs no error" for i in (10, 13)},
    RTM + "xǁOrtRuntimeǁ__init____mutmut_25": "the CPU fallback never added: the only provider "
    "installed here is the CPU one, which never gets it",
    **{f"{RTM}xǁOrtRuntimeǁ_read_profile__mutmut_{i}": "unlink's missing_ok: end_profiling "
       "just wrote the trace this reads" for i in (5, 6)},
    **{f"{RTM}xǁOrtRuntimeǁclose__mutmut_{i}": "rmtree's ignore_errors: the directory is this "
       "runtime's own, made in __init__ and removed once" for i in (2, 4, 5)},
    **{f"{RTM}x_placement_from_trace__mutmut_{i}": "the name of a Node event without one ('', "
       "'None' or 'XXXX'): any one string keys it" for i in (23, 24, 25, 28)},
    RTM + "x_resolve_runtimes__mutmut_14": "the provider translation applied to every format: "
    "it maps no name of another format's runtimes (file, c, executorch), ref and openvino map to "
    "themselves, and a refusal names the raw name either way",
    **{f"{RTM}x_resolve_runtimes__mutmut_{i}": "ALIASES skipped: the provider search finds the "
       "same provider for every alias that is its provider's stem (cpu, cuda, tensorrt, dml, "
       "...); the others (trt, ov) are refused or mapped alike (ov by its own line), a refusal "
       "naming the raw name" for i in (19, 20)},
    **{f"{RTM}xǁOrtRuntimeǁ__init____mutmut_{i}": "providers left to onnxruntime: its default is "
       "every available provider that runs nodes, the CPU one alone here (with_options adds "
       "options for GPU providers only)" for i in (36, 39)},
    **{f"{RTM}{fn}__mutmut_{i}": "run(None) returns every output, whose first is outputs[0], "
       "the one named" for fn, i in (("xǁOrtRuntimeǁrun", 3), ("xǁOrtRuntimeǁrun", 9),
                                     ("xǁRefRuntimeǁrun", 6), ("xǁRefRuntimeǁrun", 13))},
    **{f"{RTM}xǁOpenVinoRuntimeǁ__init____mutmut_{i}": "OpenVINO's refusals are never raised "
       "here: every op of a checked graph is placed on the CPU and CONFIG's f32 is honoured (the "
       "messages are tested by themselves: unplaced_refusal, precision_refusal)"
       for i in (12, 13, 18, 64, 71)},
    **{f"{RTM}{fn}__mutmut_{i}": "dequantise's row0 is read only for per-row (axis 0) "
       "parameters; a table's int8 scales run along its columns (axis 1) or are one per tensor"
       for fn, i in (("xǁFileRuntimeǁrows", 3), ("xǁFileRuntimeǁrows", 6),
                     ("xǁCRuntimeǁrows", 16), ("xǁCRuntimeǁrows", 19))},
    **{f"{RTM}xǁCRuntimeǁrows__mutmut_{i}": "np.arange of Python ints is int64 (numpy's default "
       "integer on 64-bit Linux), the dtype given" for i in (10, 13)},
    **{f"{RTM}xǁCRuntimeǁrun__mutmut_{i}": "reshape(-2): numpy takes any negative size as the one "
       "inferred, as -1" for i in (32, 47)},
    RTM + "x_open_positions_runtime__mutmut_14": "open()'s closefd=True dropped: True is its "
    "default",
    # h-m3: graphs/sliced.py, formats/c_sliced.py, graphs/trig.py
    **{f"{SLI}{fn}__mutmut_{i}": "an initializer's name (None or dropped: Graph numbers one "
       "c_N, under subgraph prefix_c_N; XX or upper case: another literal part): still unique "
       "and, where the caller gave a prefix, prefixed (tests/test_mut_sliced.py checks both); "
       "nothing reads an initializer by its name" for fn, nums in (
           ("binary", (93, 96, 115, 118, 139, 142)),
           ("columns_graph", (181, 182, 183, 184, 186, 187, 192, 199, 200, 207, 215, 216)),
           ("cos_sin", (48, 49, 51, 52, 53, 54)),
           ("rotary_columns", (312, 313, 315, 316, 317, 318, 320, 321, 330, 331, 332, 333, 335,
                               336, 338, 339)),
           ("sinusoidal", (57, 60, 62, 63))) for i in nums},
    **{f"{SLI}{fn}__mutmut_{i}": "g.const(python int(s), None): np.asarray infers int64, the "
       "dtype given" for fn, nums in (
           ("_slice_indices", (42, 71, 92)), ("cos_sin", (34, 43)), ("sinusoidal", (56,)),
           ("rotary_columns", (78, 84, 132, 152, 188, 209, 307, 325, 451, 531, 554, 561)))
       for i in nums},
    **{f"{SLI}{fn}__mutmut_{i}": "g.const(a float32 array, None) keeps float32 (the slice "
       "tables, is_sin and 1 - 2 is_sin are float32 already)" for fn, nums in (
           ("binary", (138,)), ("columns_graph", (24, 30, 87, 94, 103, 219)),
           ("rotary_columns", (253, 290, 297))) for i in nums},
    **{f"{SLI}columns_graph__mutmut_{i}": "the slot indices' dtype: asarray(slots, None) is "
       "int64 and g.const converts it to index_type, or g.const(.., None) keeps the index_type "
       "array as it is" for i in (44, 50, 52)},
    SLI + "columns_graph__mutmut_56": "is_sin as float64: every constant made of it is "
    "converted by g.const(.., np.float32), and 0, 1 and -1 are exact",
    **{f"{SLI}{fn}__mutmut_{i}": "Gather's axis=None or dropped: onnx.helper.make_node drops a "
       "None attribute and Gather's axis defaults to 0" for fn, nums in (
           ("binary", (129, 133)),
           ("columns_graph", (280, 284, 300, 304, 317, 321, 341, 345, 356, 360, 426, 430)),
           ("rotary_columns", (262, 266))) for i in nums},
    **{f"{SLI}rotary_columns__mutmut_{i}": "com.microsoft RotaryEmbedding's num_heads=None or "
       "dropped: its default 0 makes the kernel take the head size from the cache (2 x k "
       "columns) and num_heads = hidden / head size = 1, the value given" for i in (486, 494)},
    **{f"{SLI}{fn}__mutmut_{i}": "zip's strict flag: the sequences have equal lengths (strict "
       "never fires), or strict=False's default where they do not (idx, one shorter; "
       "rotary_columns' shifts, one longer than widths_low: strict=None or dropped is False)"
       for fn, nums in (
           ("_slice_indices", (18, 21, 22, 349, 352)), ("binary", (70, 73, 74)),
           ("rotary_columns", (164, 167))) for i in nums},
    # hmut5: rotary_columns after issue 44 (fold, mirrored slices, cache padding), renumbered
    **{f"{SLI}rotary_columns__mutmut_{i}": "Mod's fmod=None or dropped: make_node drops a None "
       "attribute and fmod's default is 0, the value given" for i in (94, 98)},
    SLI + "rotary_columns__mutmut_137": "the positions' pad rows hold 1 instead of 0: every id "
    "is masked into its cache (BitwiseAnd) and the pad rows come after the N rows, which the "
    "final Slice keeps: their values never reach the output",
    SLI + "rotary_columns__mutmut_281": "zero = \"\" instead of None: as falsy (zero or "
    "g.const(..) makes the constant at the first padded cache either way)",
    SLI + "rotary_columns__mutmut_549": "the final Slice's axes [0] dropped: Slice's axes default "
    "to [0 .. len(starts) - 1] = [0]",
    SLI + "_frequencies__mutmut_5": "getattr's default None instead of False: as falsy",
    SLI + "_half_ulp_below__mutmut_11": "x >= 1: at x = 1 ceil(log2 x) = 0, e = 0 either way",
    SLI + "_half_ulp_below__mutmut_3": "the branch for every x: for 0 < x <= 1 ceil(log2 x) <= "
    "0 and max(0, .) is 0, the else's value (callers pass x >= 1)",
    SLI + "_half_ulp_below__mutmut_8": "max(1, .) for x > 1: ceil(log2 x) >= 1 there",
    **{f"{SLI}_prefixed__mutmut_{i}": "the name counter stepped by -1 or 2: still a different "
       "number for every name" for i in (2, 3)},
    SLI + "_record__mutmut_3": "d_model / 2: rope and sinusoidal refuse an odd d_model "
    "(resolve), so the slot count is an integer-valued float and int() of the bytes the same",
    SLI + "_record__mutmut_104": "min(limit, spec_limit) always: rope's and sinusoidal's "
    "spec.position_limit is 2^24, never None",
    **{f"{SLI}{fn}__mutmut_{i}": "the offset's default or the scheme test: resolve fills "
       "every declared param, so a sinusoidal config always holds 'offset', and rope (the "
       "other sliced trig scheme) has none: .get's default is never used and rope's offset "
       "is 0 either way" for fn, nums in (("_record", (71, 75, 77, 80)),
                                           ("plan_of", (3, 7, 9, 12))) for i in nums},
    **{f"{SLI}_record__mutmut_{i}": "position_limit without the lowering (bitwise's 2^bits - 1 "
       "for trunc too): trunc's 2^24 cap is also rope's and sinusoidal's spec.position_limit, "
       "taken by the min two lines below" for i in (93, 95)},
    SLI + "_slice_indices__mutmut_134": "Clip(-2 x, 0, 1) for Clip(-x, 0, 1): x is an "
    "integer-valued float32, so both are 1 for x <= -1 and 0 for x >= 0",
    SLI + "binary__mutmut_26": "astype(None) is float64: the float32 weights widened exactly, "
    "and binary_tables sums them in float64 anyway",
    SLI + "binary__mutmut_30": "integer=None: as falsy as False",
    SLI + "binary__mutmut_76": "BitShift by 0 of the lowest slice: the same bits",
    SLI + "binary_plan__mutmut_13": "parse_plan's max_len 2 instead of 1: a plan of at least "
    "one bit covers both (the exact bit count is checked just after)",
    **{f"{SLI}binary_plan__mutmut_{i}": "default_plan(2^nb) for nb <= 6 is (nb,), one slice: "
       "the else's value" for i in (16, 20)},
    **{f"{SLI}binary_tables__mutmut_{i}": "the dtype of the bits or rows (float64 where int64 "
       "was meant, or None = float64): the sums of <= 64 int8 rows are exact in float64 and "
       "astype(int16) gives the same tables; the float path sums in float64 either way"
       for i in (8, 13, 14, 16, 18)},
    SLI + "binary_tables__mutmut_20": "len(rows) <= w: pads with w - len(rows) = 0 zero rows",
    **{f"{SLI}binary_tables__mutmut_{i}": "the zero rows' dtype float64: the concatenation and "
       "the matmul give the same exact sums (int16 after astype)" for i in (24, 26)},
    SLI + "columns_graph__mutmut_170": "rows = 2^(w + 1): Slice clamps start and stop to the "
    "table, so the kept block is the whole table (bitwise: its extra row too, which only moves "
    "the negative rows one further, where Gather's negative index reads from the end) and the "
    "mirrored block starts at its last row, as before",
    SLI + "cos_sin__mutmut_56": "Slice end 3k instead of 2k: Slice clamps it to the axis",
    SLI + "default_plan__mutmut_19": "bits < 24: at 24 bits ceil(24 / 12) = 2 slices either way",
    **{f"{SLI}slice_tables__mutmut_{i}": "astype(None) is float64, and arange of int64 times a "
       "float is float64: the same exact angles" for i in (3, 31, 33, 48)},
    SLI + "subgraph__mutmut_6": "the Graph's name: subgraph returns its nodes and initializers "
    "only",
    SLI + "subgraph__mutmut_11": "names prefix_None_N instead of prefix_stem_N: still prefixed "
    "and numbered",
    **{f"{CSL}{fn}__mutmut_{i}": "zip's strict flag: the sequences have equal lengths (shifts "
       "and widths of one plan, tables and their biases), so strict never fires"
       for fn, nums in (("_binary", (113, 116, 117)), ("_trig", (150, 153, 154)),
                        ("pack_lanes", (33, 36, 37))) for i in nums},
    **{f"{CSL}{fn}__mutmut_{i}": "the hashed bytes in the table's own dtype instead of an "
       "explicit little-endian one: the same bytes on a little-endian host (x86-64 and Arm64, "
       "every platform edgepe runs on)" for fn, nums in (("_binary", (181, 183)),
                                                        ("_trig", (220, 222))) for i in nums},
    CSL + "_binary__mutmut_27": "binary_tables(.., integer=None): float32 tables of the float64 "
    "sums of the int8 rows, exact integers, which pack_lanes converts to int64 as the int16 ones",
    CSL + "_binary__mutmut_31": "biases None at first: an int8 header replaces it with "
    "pack_lanes' list, a float header never reads it",
    CSL + "_binary_lanes__mutmut_22": "0xffffu for 0xFFFFu: C's hex digits are case-insensitive",
    **{f"{CSL}_binary_lanes__mutmut_{i}": "the odd last column's word read at r_c[i] instead of "
       "r_c[even]: the loop before it leaves i == even" for i in (74, 75)},
    **{f"{CSL}_trig__mutmut_{i}": "astype(None) is float64: the float32 values widened "
       "exactly; slice_tables rounds them to float32 again and max() is the same"
       for i in (13, 28)},
    CSL + "_trig__mutmut_169": "offset >= 0 for > 0 inside 'if offset:': the offset is "
    "nonzero there, the same sign picked",
    CSL + "_trig__mutmut_18": "getattr's default None: bool(None) is False",
    **{f"{CSL}_trig__mutmut_{i}": "rstrip(None) or rstrip('XX\\nXX'): the store lines end in "
       "';\\n', the same newline stripped" for i in (212, 214)},
    CSL + "_trig__mutmut_213": "lstrip for rstrip: the store's trailing newline stays, one "
    "blank line more inside the C function (whitespace)",
    **{f"{CSL}pack_lanes__mutmut_{i}": "np.full(.., b, None) of a python int is int64, the dtype "
       "given" for i in (50, 53)},
    **{f"{TRG}{fn}__mutmut_{i}": "an initializer's or an intermediate output's name (None or "
       "dropped: Graph numbers one, c_N or sin_N; XX or upper case: another literal): still "
       "unique in the graph, and nothing reads it by name (the graph's inputs and outputs, "
       "x, positions, pe, y, theta and the caches, are checked by tests/test_mut_trig.py)"
       for fn, nums in (
           ("_cache_model", (32, 35, 37, 38, 42, 45, 47, 48, 51, 54, 55, 56)),
           ("_ort_rotary_4d", (4, 7, 12, 13, 38, 41, 43, 44, 54, 57, 59, 60, 99, 102, 104, 105,
                               130, 133, 136, 137, 171, 174, 180, 181)),
           ("_sin_cos", (11, 14, 18, 19, 22, 25, 29, 30)), ("rope", (89, 92, 94, 95)),
           ("sinusoidal_learned", (15, 24, 25, 29, 32, 33, 34)),
           ("mrope", (15, 18, 19, 20, 37, 40, 48, 49, 78, 81, 85, 86, 89, 92, 96, 97)))
       for i in nums},
    **{f"{TRG}{fn}__mutmut_{i}": "g.const(python int(s) or an int64, None): np.asarray infers "
       "int64, the dtype given" for fn, nums in (
           ("_angles", (22, 47)), ("_cache_model", (31, 41, 50)), ("_interleaved", (8, 55)),
           ("_onnx_rotary", (3, 10, 14, 35, 56)), ("_onnx_rotary_half", (3, 10, 115)),
           ("_ort_rotary_4d", (3, 37, 53, 98, 129, 170)), ("_ort_rotary", (29,)),
           ("_standard_rotary", (25,)), ("rope", (88,)), ("sinusoidal_learned", (84,)),
           ("mrope", (14,)))
       for i in nums},
    **{f"{TRG}{fn}__mutmut_{i}": "g.const(a float32 buffer's array, None) keeps float32 "
       "(inv_freq, scale and residual are float32 buffers)" for fn, i in (
           ("_angles", 72), ("_sin_cos", 42), ("sinusoidal_learned", 28), ("mrope", 36))},
    **{f"{TRG}{fn}__mutmut_{i}": "inv_freq or scale as [k] (or reshape(1, -2): numpy takes any "
       "negative size as the inferred one) instead of [1, k]: Mul broadcasts [N, 1] x [k] to "
       "the same [N, k]" for fn, i in (("_angles", 55), ("_angles", 59), ("_sin_cos", 49),
                                       ("_sin_cos", 53), ("mrope", 43), ("mrope", 47))},
    **{f"{TRG}{fn}__mutmut_{i}": "getattr's default: every sinusoidal module has layout and "
       "offset, and a default None is as falsy as 0 or False" for fn, i in (
           ("_angles", 4), ("_sin_cos", 33), ("sinusoidal", 7), ("sinusoidal", 10),
           ("sinusoidal", 13), ("sinusoidal", 14))},
    **{f"{TRG}{fn}__mutmut_{i}": "r / 2 for r // 2: r is even, and g.const(.., np.int64) "
       "converts the float 2.0 to 2" for fn, i in (("_onnx_rotary_half", 14),
                                                   ("_ort_rotary_4d", 10))},
    **{f"{TRG}{fn}__mutmut_{i}": "rotary_embedding_dim (and num_heads 1) given also when r == "
       "d: the whole head, the ops' default; _onnx_rotary_half's extra Slice x[d:d] is empty "
       "and Concat adds nothing" for fn, nums in (
           ("_onnx_rotary_half", (99,)), ("_ort_rotary_4d", (184, 187)), ("_ort_rotary", (3, 9)),
           ("_standard_rotary_4d", (3, 6)), ("_standard_rotary", (43, 46))) for i in nums},
    TRG + "_ort_rotary_4d__mutmut_206": "num_heads=2 for a 4-D x: onnxruntime's "
    "com.microsoft.RotaryEmbedding takes the heads of a [B, H, S, d] input from its shape "
    "(the attribute is for 3-D input; measured: the same rows)",
    TRG + "sinusoidal__mutmut_42": "Concat axis=+1 for -1: the [N, k] halves are rank 2",
    **{f"{TRG}sinusoidal_learned__mutmut_{i}": "Gather's axis=None or dropped: make_node drops "
       "a None attribute and Gather's axis defaults to 0" for i in (39, 43)},
    TRG + "sinusoidal_learned__mutmut_87": "Unsqueeze at axis +1 for -1 of the rank-1 inside "
    "flags: both make [N, 1]",
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
    LOW + "lower_interleaved__mutmut_124": "the positions' name left to the fallback: graft's "
    "own Gather of the table reads {prefix}positions_squeezed whenever graft made that tensor, "
    "so the fallback finds the same name",
    **{f"{LOW}lower_interleaved__mutmut_{i}": "np.asarray([0, 0, -1], None) is int64, the "
       "dtype given" for i in (431, 433)},
    **{f"{LOW}_batch_positions__mutmut_{i}": "Gather's axis None or left out: ONNX's default "
       "is 0" for i in (29, 34)},
    **{f"{LOW}_batch_positions__mutmut_{i}": "np.asarray of a tuple of ints with no dtype is "
       "int64, the dtype given" for i in (57, 59)},
    **{f"{LOW}_caches__mutmut_{i}": "zip's strict flag: picked, tables and caches are each two "
       "long" for i in (40, 44, 45)},
    LOW + "lower_rope__mutmut_79": "_caches never reads its graph argument (makers and consts "
    "carry what it needs)",
    LOW + "lower_rope__mutmut_290": "the first node reading the chosen cache or a "
    "RotaryEmbedding: only the rotations read the chosen caches (the Wheres write them), so it "
    "is the first rotation either way",
    LOW + "lower_rope__mutmut_293": "the first rotation reading the sin cache instead of the "
    "cos cache: every rotation reads both",
    LOW + "lower_interleaved__mutmut_53": "shapes None instead of {} after infer_shapes raised: "
    "non-strict inference skips a node it cannot infer instead of raising, for every model "
    "graft has read (it was parsed and found first)",
    # h-n2: graphs/lowerings.py, graphs/bits.py
    **{f"{LWR}{fn}__mutmut_{i}": "an initializer's name (None or dropped: Graph numbers a "
       "fresh c_N; XX or upper case: another literal): still unique in the graph "
       "(tests/test_mut_lowerings.py checks), and nothing reads a lowering's initializer by "
       "its name" for fn, nums in (
           ("arith32_columns", (31, 34, 40, 41, 60, 63, 69, 70, 83, 86, 98, 99, 123, 126, 128,
                                129)),
           ("float_columns", (36, 39, 46, 47, 69, 72, 78, 79, 88, 91, 93, 94, 113, 116, 125,
                              128, 129, 132, 141, 142, 164, 173, 174)),
           ("trunc_columns", (47, 50, 70, 73, 76, 77, 99, 103, 104, 146, 150, 151, 170, 173, 175,
                              176, 180, 190, 191, 204, 208, 209, 222, 232, 233))) for i in nums},
    **{f"{LWR}arith32_columns__mutmut_{i}": "Mod's fmod=None or dropped: make_node drops a None "
       "attribute and ONNX Mod's fmod defaults to 0, the value given" for i in (21, 25, 113, 117)},
    LWR + "arith32_columns__mutmut_130": "the last Mod's fmod=1 (C fmod, the dividend's sign): "
    "its dividend is a sum of quotients of r in [0, 2^w) by positive powers of two, never "
    "negative, where fmod and floor mod agree",
    **{f"{BTS}{fn}__mutmut_{i}": "module passed as None: _bits_model never reads its module "
       "argument and _mask_projection_model only hands it to _bits_model (the builders read "
       "the module's tensors before the call)" for fn, i in (
           ("_mask_projection_model", 22), ("binary", 4), ("binary_2d", 2), ("binary_bits", 2),
           ("binary_gated", 55), ("binary_multilevel", 3), ("binary_signed", 39),
           ("binary_smooth", 5), ("fourier_binary", 4), ("gray", 2), ("hierarchical", 10),
           ("hybrid_int_binary", 46))},
    **{f"{BTS}{fn}__mutmut_{i}": "an initializer's name (None or dropped: Graph numbers a fresh "
       "c_N; XX or upper case: another literal): still unique, and nothing reads these "
       "initializers by name (the shift form's unscaled weights and arith Gray's powers_next "
       "are in no golden)" for fn, nums in (
           ("binary", (18, 23, 24)), ("fourier_binary", (18, 23, 24)),
           ("stored_weight", (4, 7)), ("bit_columns", (203, 206, 218, 219))) for i in nums},
    **{f"{BTS}{fn}__mutmut_{i}": "g.const(a float32 array, None) keeps float32: _f32's values "
       "(lo, hi, gate, 1 - gate, the weights) and the astype(np.float32)'d scaled weights"
       for fn, nums in (("_bits_model", (63, 71)), ("binary_gated", (21, 47)),
                        ("stored_weight", (3, 9))) for i in nums},
    **{f"{BTS}{fn}__mutmut_{i}": "np.asarray/g.const of Python ints or int64 arrays with dtype "
       "None is int64 (numpy's default integer on 64-bit Linux), the dtype given: [-1], "
       "[1, half], 2, np.left_shift(1, int64 array), the int64 shifts of np.arange and of the "
       "modules' torch.int64 buffers, the n_bits int, hierarchical's tuple of int widths"
       for fn, nums in (("_columns", (12,)), ("hybrid_int_binary", (25,)),
                        ("bit_columns", (4, 6, 9, 11, 151, 175, 202, 242)),
                        ("hierarchical", (4, 6))) for i in nums},
    **{f"{BTS}_f32__mutmut_{i}": "asarray's dtype=float32 dropped: every value _f32 gets is a "
       "float32 torch tensor (the modules' float32 parameters and buffers, which "
       "load_state_dict copies into, and gates()), whose .numpy() is float32 already"
       for i in (2, 4)},
    BTS + "_f32__mutmut_6": "the torch branch taken always: every value _f32 gets is a torch "
    "tensor (module.lo, hi, gates(), basis, projection.weight)",
    BTS + "bit_columns__mutmut_1": "gray's default True: the only caller, _bits_model, always "
    "passes gray",
    BTS + "bit_columns__mutmut_24": "inside as bool: g.const(inside, np.uint64) converts it to "
    "the same 0/1",
    BTS + "bit_columns__mutmut_127": "g.const(inside, None): inside is uint64 already",
    BTS + "_mask_projection_model__mutmut_51": "the masks' dtype None: bit_masks returns int32 "
    "for width 32 and int64 for 64, the dtype given",
    **{f"{BTS}_mask_projection_model__mutmut_{i}": "bit_masks at its default width 64: for "
       "width 64 the same; for width 32 the int64 masks 2^k (k < 32) are cast by "
       "g.const(.., np.int32), numpy's wrapping cast, to the same int32 values (2^31 to "
       "INT32_MIN, the view's value)" for i in (57, 59)},
    BTS + "bit_masks__mutmut_1": "default width 65: the width only selects the int32 branch at "
    "32; 64 and 65 both take the int64 view",
    BTS + "mask_scaling__mutmut_10": "_mask_weights at width 64 for n <= 32: mask_inverse(n, 64) "
    "and (n, 32) differ only in bit 31's sign, and exactness and normality depend on "
    "magnitudes; n <= 32 < 64 is never refused (n > 32 has width 64 anyway)",
    BTS + "stored_weight__mutmut_14": "the scaled weights in float64: w * 2^-k is exact there, "
    "and g.const's cast to float32 rounds it once, as float32's multiply does",
    # h-n3: formats/c.py
    **{f"{CFM}_body__mutmut_{i}": "binary-smooth's lo, hi as a float64 array: two float32 "
       "values (.item() of float32 tensors), which c_floats converts back to float32 exactly"
       for i in (22, 24)},
    CFM + "_compute_header__mutmut_122": "size 1 with digest None: _closing writes the sha256 "
    "comment (the only reader of size) only when digest is not None",
    **{f"{CFM}_compute_header__mutmut_{i}": "the hashed weights in their own dtype instead of "
       "an explicit little-endian one: the same bytes on a little-endian host (x86-64 and Arm64, "
       "every platform edgepe runs on)" for i in (153, 155)},
    CFM + "_float_compute_header__mutmut_18": "values as float64 (astype(None)): the float32 "
    "buffer widened exactly; every use converts back (c_floats, astype('<f4')) or counts (size)",
    **{f"{CFM}_quant_constants__mutmut_{i}": "the scales as float64 (dtype None): float32 "
       "values widened exactly; c_floats converts back to float32, size is the same"
       for i in (4, 6)},
    CFM + "c_floats__mutmut_18": "reshape(1, -2): NumPy reads any negative size as the one "
    "to infer (np.zeros(3).reshape(1, -2).shape == (1, 3))",
    CFM + "c_rows__mutmut_15": "astype(None) is float64, the dtype given",
    **{f"{CFM}c_rows__mutmut_{i}": "the integral-literal fix applied to integer text too: "
       "\"%d\" cells have no \"f\" suffix for _INTEGRAL to match, so it changes nothing"
       for i in (32, 40, 41)},
    CFM + "check_file__mutmut_4": "decode() without an encoding is UTF-8, the one given",
    CFM + "check_file__mutmut_7": "\"UTF-8\" and \"utf-8\" name the same codec (Python's "
    "codec lookup ignores case)",
    **{f"{CFM}variant_tag__mutmut_{i}": "the float16 tag is never made: check_c_choices and "
       "c_sliced.check refuse --dtype float16 before any names() call (tests/test_mut_c.py, "
       "test_the_refusals_name_what_a_header_can_hold)" for i in (27, 28, 29, 30)},
    # h-n5: rebuild.py, verify/__init__.py, formats/npy.py, graphs/table_values.py,
    # formats/onnx_table.py, formats/onnx.py, graphs/untrusted.py
    ONX + "check_file__mutmut_18": "onnx.load(load_external_data=None): onnx.load tests it for "
    "truth (`if load_external_data:`), and None is falsy like False: nothing external is loaded",
    OTB + "x_split_table__mutmut_113": "frombuffer without count reads from the offset to the "
    "mapping's end: graph_bytes is the file's size less the header and the table's rows * cols * "
    "itemsize bytes, so that is the same rows * cols entries (it differs only if the file grows "
    "between the stat and the mmap, a race a test cannot stage without a writer thread)",
    OTB + "x_split_table__mutmut_71": "graph_bytes of 1 let through: one byte is never a "
    "protobuf message (each of the 256 fails onnx.load_from_string: every field tag needs a value "
    "after it), so None is returned either way",
    OTB + "x_split_table__mutmut_91": "the second open(path) is only for its descriptor, which "
    "mmap maps read-only (ACCESS_READ): text or binary mode opens the same O_RDONLY descriptor",
    **{f"{TVL}table_rows__mutmut_{i}": "torch.arange of Python ints without a dtype is int64 "
       "(torch's default integer), the dtype given" for i in (4, 7)},
    **{f"{TVL}table_rows__mutmut_{i}": "the key position 0 as a float32 zero: alibi's and "
       "gaussian's encode cast q - k to float32 at once, and an int64 distance minus a float32 0 "
       "is that distance in float32, exact within +-2^24, the limit their check_domain enforces"
       for i in (21, 23)},
    TVL + "table_rows__mutmut_52": "unsqueeze(+1) of the 1-D index is unsqueeze(-1): [N, 1]",
    TVL + "table_rows__mutmut_56": "mrope's positions expanded to 4 equal columns: encode reads "
    "only its three streams' columns (positions[:, self.streams], streams in 0..2)",
    TVL + "table_rows__mutmut_59": ".to(None) keeps the dtype: every scheme's encode returns "
    "float32",
    TVL + "table_rows__mutmut_24": "two key positions 0: [:, :, 0] keeps the first column, the "
    "same rows (the second is computed and dropped)",
    TVL + "table_rows__mutmut_41": "bits(index, width, 65): columns with a shift >= n are zeroed, "
    "and the shifts are the column indices below width <= 63 (hierarchical refuses widths > 63; "
    "binary-2d's width is max_len's bit count), so n = 64 or 65 zeroes none",
    TVL + "table_rows__mutmut_44": ".to(None) keeps the dtype: bits() and every scheme's encode "
    "(and the float64 Definition's, rounded) return float32 already",
    **{f"{VER}_parity__mutmut_{i}": "the probe's own tolerance (None, or probe=False/None): "
       "tolerance_for(m, probe=True) differs from tolerance_for(m) only when m has "
       "quant.bound_all_positions, and _parity's m is the rebuild's manifest (this edgepe's; with "
       "rebuild=False the one this process just exported), which never has it: no exporter "
       "writes the field (grep -rn bound_all_positions edgepe/ finds its readers only: "
       "tolerance_for, rebuild.looser, the schema); tests/test_mut_verify.py tests "
       "tolerance_for's probe branch directly" for i in (31, 33, 35, 36, 115)},
    **{f"{RBD}read_manifest__mutmut_{i}": "prepare(config) without the module builds it from the "
       "config: build(scheme, seed, checkpoint=None (a manifest embedded with a checkpoint is "
       "refused above), no key, no param (the embedded inputs record neither)), the very module "
       "config_from_manifest built, so the same bytes (work only)" for i in (74, 76)},
    # h-n1: edgepe/graft/__init__.py
    GRF + "_umask__mutmut_3": "os.umask(1) instead of umask(0) to read the mask: either call "
    "returns the mask it replaces, and the next line puts that back",
    # (renumbered by issues 40/41's lines: hmut3)
    **{f"{GRF}graft_found__mutmut_{i}": "zip's strict flag over found and hf_records: "
       "hf_records is made [None] * len(found) just above, so strict never fires"
       for i in (208, 211, 212)},
    **{f"{GRF}graft_found__mutmut_{i}": "zip's strict flag over the PE's outputs and "
       "one.replaces: build_found, build_t5 and mrope.build each make one output per replaced "
       "tensor (find_hf's tables are keyed by found.replaces; T5's one bucket; mrope's cos, "
       "sin), so strict never fires" for i in (279, 282, 283)},
    **{f"{GRF}graft_found__mutmut_{i}": "zip's strict flag over found and records: the loop "
       "above appends one record per PE found (a whole table's `continue` comes after its "
       "append), so strict never fires" for i in (534, 537, 538)},
    GRF + "graft_found__mutmut_130": "streams() for one candidate too: it returns None for "
    "fewer than two (its first check), the value the else gives",
    GRF + "graft_found__mutmut_72": "together = None for False: both falsy, and together is "
    "only tested for truth (`not together`, `if together`) until accepted_together sets it",
    **{f"{GRF}graft_found__mutmut_{i}": "the '--max-len' fallback of the declared bound's "
       "refusal: max_len_from is None only when --max-len was given, which the option check "
       "at the top holds to the same 1 .. 2^24, and check_hf_config / mrope.check_config "
       "return the given one unchanged: unreachable" for i in (200, 201)},
    **{f"{GRF}graft_found__mutmut_{i}": "prove_streams' seed (None: fresh entropy; dropped: "
       "its default 0): it draws only the batch-of-2 random positions (and the cone's other "
       "inputs, which cos/sin do not read), every column of which repeats a (stream, position) "
       "the full sweep of 0 .. max_len - 1 already compared: the same worst errors"
       for i in (653, 659)},
    **{f"{GRF}write_model__mutmut_{i}": f"{what} dropped: it is "
       "onnx.external_data_helper.convert_model_to_external_data's default"
       for i, what in ((29, "all_tensors_to_one_file=True"), (31, "size_threshold=1024"))},
    GRF + "write_model__mutmut_17": "name = '' for None: name is compared only with a data "
    "file's name (never empty) in the clean-up, where both mean 'no new data file'",
    **{f"{GRF}write_model__mutmut_{i}": "the random part of the staged data file's temporary "
       "name (renamed or removed within the call): 8, 10 or 64 hex digits after temp_prefix's "
       "29 characters, unique and short either way" for i in (22, 23)},
    **{f"{GRF}write_model__mutmut_{i}": "the block size of the staged data file's sha256: "
       "the digest of the same bytes whatever the blocks (whole-file read: memory only, "
       "peak set by the model's serialisation before it)" for i in (53, 55, 56)},
    **{f"{GRF}write_model__mutmut_{i}": "missing_ok on OUT's temporary file after os.replace "
       "failed: write_temp made it just before and a failed rename leaves it, so it is there "
       "to remove" for i in (109, 111)},
    **{f"{GRF}declared_max_len__mutmut_{i}": "ok = None for False: both falsy, and ok is "
       "only tested for truth (the while, `not ok`)" for i in (79, 127)},
    GRF + "declared_max_len__mutmut_81": "continue -> break right after ok = False: the "
    "while's `ok` ends the walk at once either way",
    # h-n4: graft/find_hf.py
    FHF + "_alibi__mutmut_50": "continue -> break leaves only the Mul's other (slopes, Cast) "
    "reading: input 0 is then a constant and input 1 Cast-made, so the reverse would need a "
    "constant (an initializer, a Constant's or an Identity's output) made by a Cast",
    **{f"{FHF}_flat_positions__mutmut_{i}": "np.asarray([-1], None) is int64, the dtype given"
       for i in (31, 33)},
    **{f"{FHF}_flat_positions__mutmut_{i}": "the checker without full_check on a graph that "
       "passes the full check (edgepe's own gathered_tables/sliced_rope graph plus one "
       "Unsqueeze; the tests run every one through onnxruntime)" for i in (39, 40)},
    **{f"{FHF}_gptj_gather_elements__mutmut_{i}": "GatherElements' axis when unset: None and 0 "
       "both differ from 1" for i in (11, 14)},
    **{f"{FHF}{fn}__mutmut_{i}": "the default for axes that are no constant: "
       "np.asarray(None).ravel().tolist() is [None], refused as [] is" for fn, i in (
           ("_gptj_gather_elements", 90), ("_gptj_gather_elements", 92),
           ("_rope_matmul", 136), ("_rope_matmul", 138))},
    **{f"{FHF}_half_sinusoidal_distance__mutmut_{i}": "np.arange's dtype dropped: an int64 "
       "arange times a float64 (-2.0 * i, p * w) is the same float64 values" for i in (21, 23,
                                                                                    27, 29)},
    **{f"{FHF}{fn}__mutmut_3": "width / 2 for width // 2: the width is even (checked "
       "first), so half is the same number as a float; np.arange(4.0) == np.arange(4)"
       for fn in ("_half_sinusoidal_distance", "_is_fairseq_sinusoidal")},
    **{f"{FHF}_sinusoid_within__mutmut_{i}": "np.arange's dtype dropped: an int64 arange times "
       "the float64 w is the same float64 angles" for i in (4, 6)},
    FHF + "_learned__mutmut_161": "half computed for a Gather of a fairseq table too: its row 1 "
    "is zero where Marian's definition has cos(w) >= cos(1) > 0.5, far past the bound: None, "
    "as before",
    **{f"{FHF}{fn}__mutmut_{i}": "readers.get's default for a Cos's input: the Cos itself reads "
       "it, so it is always there" for fn, i in (("_rope", 14), ("_rope", 16),
                                                 ("_rope_matmul", 13), ("_rope_matmul", 15))},
    **{f"{FHF}{fn}__mutmut_{i}": "concat.input[1] for [0]: the check before requires them "
       "equal" for fn, i in (("_rope", 43), ("_rope_matmul", 44))},
    **{f"{FHF}{fn}__mutmut_{i}": "factors[1] for factors[0]: the check before requires them "
       "equal" for fn, i in (("_rope", 184), ("_rope", 185), ("_rope", 221),
                             ("_rope_matmul", 190), ("_rope_matmul", 191),
                             ("_rope_matmul", 223))},
    **{f"{FHF}_rope_fused__mutmut_{i}": "next()'s default (no non-constant input): then both "
       "inputs are 1-D constants, len(inv) == 2 refuses the Mul, and makers.get of None or of "
       "an absent name is None alike" for i in (16, 20)},
    **{f"{FHF}_rope_fused__mutmut_{i}": "readers.get's default for a scaled cache read by "
       "nothing: None and [] are both refused by `not users` before anything iterates them"
       for i in (87, 89)},
    FHF + "_rope_matmul__mutmut_146": "reshape(-2): numpy takes any negative size as the "
    "unknown dimension, as -1",
    FHF + "_scalar_add__mutmut_18": "dtype.kind in 'XXiuXX': kind is one letter, never X; 'i' "
    "and 'u' are found as in 'iu'",
    **{f"{FHF}build_found__mutmut_{i}": "flat_positions' default None for False: both falsy, "
       "and flat is only tested for truth" for i in (21, 23)},
    **{f"{FHF}build_found__mutmut_{i}": "an angle's own columns counted as R/2 in the early "
       "size check: the final _check_size over the built tables (their real size) refuses with "
       "the same line; the early one only spares building tables up to twice the limit"
       for i in (64, 68, 69)},
    **{f"{FHF}check_hf_config__mutmut_{i}": "`family = 'rope' if found.family == 'rope' else "
       "found.family` is found.family whatever the test" for i in (4, 9, 10)},
    **{f"{FHF}check_hf_config__mutmut_{i}": "astype(None) is float64, the dtype given" for i in
       (143, 271)},
    **{f"{FHF}check_hf_config__mutmut_{i}": "original_max_position_embeddings' default: "
       "hf_config._rope records it for every rope_type but default, and it is read only for "
       "longrope" for i in (71, 73, 76)},
    FHF + "check_hf_config__mutmut_93": "the long set at original + 2 for original + 1: rope "
    "takes long_factor for any seq_len > original_max_position_embeddings",
    FHF + "check_hf_config__mutmut_119": "edgepe's inv_freq kept in float64: rope with "
    "freq_dtype=float32 holds float32 values, equal as float64 to the model's float32 ones "
    "(array_equal compares values)",
    **{f"{FHF}check_hf_config__mutmut_{i}": "np.asarray of the found inv_freq without float32: "
       "every matcher requires it float32 already" for i in (127, 129)},
    **{f"{FHF}find_pe__mutmut_{i}": "an argument the matcher never reads (readers for _learned, "
       "_alibi and _gptj_gather_elements; makers for _mpt_alibi) passed as None"
       for i in (25, 33, 40, 57)},
    **{f"{FHF}_alibi_shaped__mutmut_{i}": "zip's strict flag: left and right are each padded "
       "to rank, so their lengths are equal" for i in (33, 36, 37)},
    **{f"{FHF}_alibi_shaped__mutmut_{i}": "the PE graph's name: splice takes its nodes, "
       "initializers and values into the model's graph, and nothing reads the name"
       for i in (77, 78)},
    **{f"{FHF}_alibi_shaped__mutmut_{i}": "the checker without full_check on a graph that "
       "passes the full check (two nodes; the tests run the full check and onnxruntime on it)"
       for i in (118, 119)},
    **{f"{FHF}build_whole__mutmut_{i}": "the module built by build(scheme) with its default "
       "seed, or by prepare itself (prepare(config, None) builds it as build_whole does): "
       "sinusoidal has no random weights and no checkpoint" for i in (62, 65, 67)},
    **{f"{FHF}build_whole__mutmut_{i}": "parse_model's label names the bytes in its refusal "
       "only; edgepe's own export always parses" for i in (74, 77, 78)},
    **{f"{FHF}build_whole__mutmut_{i}": "np.asarray of a Python int without a dtype is int64, "
       "the dtype given" for i in (87, 89)},
    **{f"{FHF}build_whole__mutmut_{i}": "the Range's initializer names: three distinct names "
       "under each mutant, and nothing reads them by name" for i in (90, 91, 93, 94, 95, 96)},
    **{f"{FHF}build_whole__mutmut_{i}": "the Range node's name: node names are optional, "
       "splice finds nodes by their outputs (it renames only the last)" for i in (107, 111)},
    **{f"{FHF}build_whole__mutmut_{i}": "astype(None) is float64, the dtype given"
       for i in (116, 124)},
    **{f"{FHF}build_whole__mutmut_{i}": "np.arange's dtype dropped: an int64 arange times the "
       "float64 w is the same float64 angles" for i in (128, 130)},
    **{f"{FHF}rope_tables__mutmut_{i}": "astype(None) is float64, the dtype given"
       for i in (21, 27)},
    FHF + "streams__mutmut_12": "_ancestors of MPT's empty positions name: '' has no maker and "
    "is no graph input, so its cone of inputs is empty, as set()",
}

# Mutants mutmut runs but cannot observe, by name pattern: functions called once at import
# (``SCHEMA = _schema()``), before mutmut switches a mutant on in its forked worker, so every
# mutant of them runs the original. Counted as equivalent, with what pins them instead.
UNOBSERVABLE: dict[str, str] = {
    r"edgepe\.contract\.manifest\.x__schema__mutmut_\d+": "manifest.SCHEMA is built by "
    "_schema() at import, before mutmut activates a mutant (the mutant never runs); "
    "tests/test_edges.py pins every range, type and required field of SCHEMA instead",
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
    # One OpenMP/MKL thread: a child mutmut forks from a process whose thread pool already ran
    # (torch) can wait forever on the pool's lock; mutmut then counts it "timeout", i.e. killed
    # (h-m4 measured 52 such hangs in one run of verify/sweep.py, gone with this).
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
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
        # recorded: what each reason was accepted for (see moved_keys)
        "equivalent_marks": {n: diff_mark(survivors[n]["diff"]) for n in equivalent},
        "finished": finished, "seconds": round(time.monotonic() - start),
        **({} if finished and total else {"note": _failure_note(tail)}),
    }


def _failure_note(tail: str) -> list[str]:
    """mutmut's last line and, when its clean (unmutated) run failed, pytest's ``FAILED``/
    ``ERROR`` lines and the exception: "Failed to run clean test" alone names no test. A
    test that passes alone can fail there because mutmut runs pytest twice in one process (its
    stats run, then the clean run; the mutants in forks of it): a test that changes a
    module-level object, e.g. pops from its parametrize dict, sees the change the second time
    (tests/test_lowerings.py did, issue 33)."""
    lines = tail.strip().splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    raised = [ln for ln in lines if ln.startswith("E ")]
    return (failed + raised)[:4] + lines[-1:]


def stale_modules(recorded: dict) -> list[str]:
    """The recorded modules whose source is not the one their record ran on."""
    return [m for m in MODULES if m in recorded
            and recorded[m].get("source_sha256") != source_sha256(m)]


def fits(record: dict | None, left: float) -> bool:
    """Whether a module's run can finish in ``left`` seconds, by its last recorded run (a
    module's mutants and tests change little between runs). One that cannot would be cut short
    unfinished, which checks nothing: CI's budget goes to the modules that can finish in it (the
    first stale module, graft/prove.py at 589 s, was cut at 150 s in every CI run before). A
    module never run, or recorded without its time, is tried."""
    return record is None or record.get("seconds") is None or record["seconds"] <= left


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


def diff_mark(diff: list[str]) -> str:
    """A short fingerprint of a mutant's diff lines."""
    return hashlib.sha256("\n".join(diff).encode()).hexdigest()[:12]


MOVED = "equivalent key moved"


def moved_keys(old: dict | None, result: dict) -> dict:
    """``result`` with every equivalent whose diff is not the one its key named in ``old``'s
    run counted as a survivor (status ``MOVED``) instead. EQUIVALENT is keyed by mutmut's
    numbers, which move when a function's source changes: a stale key would silently excuse
    another mutant, perhaps a real survivor (hmut4 found untrusted.py's keys off by 2, one
    excusing a real survivor). Renumber the key, or rerun once the reason is checked against
    the new diff (this run records it)."""
    marks = (old or {}).get("equivalent_marks", {})
    moved = sorted(n for n, m in result.get("equivalent_marks", {}).items()
                   if n in marks and marks[n] != m)
    if not moved:
        return result
    diffs = result.get("equivalent_diffs", {})
    out = dict(result, survivors={**result["survivors"], **{
        n: {"status": MOVED, "diff": diffs.get(n, [])} for n in moved}},
        equivalent=result["equivalent"] - len(moved),
        equivalent_diffs={n: d for n, d in diffs.items() if n not in moved})
    denominator = out["mutants"] - out["equivalent"]
    out["score"] = round(100.0 * out["killed"] / denominator, 1) if denominator else None
    return out


def rescore(result: dict) -> dict:
    """``result`` with the survivors since listed in EQUIVALENT (or UNOBSERVABLE) moved to the
    equivalent count, its score recomputed: a reason added after a run counts without a rerun.
    Survivors killed by tests written after the run stay until the module is run again."""
    now = [n for n, s in result["survivors"].items()
           if equivalent_reason(n) is not None and s["status"] != MOVED]
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
        "module whose source has changed since (a row marked *stale*) and whose recorded",
        "seconds fit in the budget left, and fails when one that finishes has a new survivor or",
        "a lower score. A survivor listed below may already be",
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
    lines += ["", "Machine: the 2-core development machine (AMD EPYC), shared by several "
              "engineers at once (timings are wall seconds).",
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
            print(f"mutation: {len(unrecorded)} modules have no recorded run yet "
                  "(docs/mutation.md)")
    else:
        modules = list(MODULES)
    if not modules:
        print("mutation: no recorded module changed since its run; nothing to run")
        return 0
    start = time.monotonic()
    failed, skipped, too_long = [], [], []
    ran: dict[str, dict] = {}
    for module in modules:
        spent = time.monotonic() - start
        if args.budget_s is not None and spent >= args.budget_s:
            skipped.append(module)
            continue
        if args.budget_s is not None and not fits(recorded.get(module), args.budget_s - spent):
            too_long.append(f"{module} ({recorded[module]['seconds']} s)")
            continue
        left = args.module_s if args.budget_s is None else min(args.module_s,
                                                               args.budget_s - spent)
        old = recorded.get(module)
        result = moved_keys(old, run_module(module, MODULES[module], args.jobs, left))
        score = "-" if result["score"] is None else f"{result['score']:.1f}%"
        print(f"{module}: {result['killed']} of {result['mutants']} killed, "
              f"{result['equivalent']} equivalent, score {score}, {result['seconds']} s"
              + ("" if result["finished"] else f" (unfinished: {result.get('note')})"),
              flush=True)
        new_survivors = set(result["survivors"]) - set((old or {}).get("survivors", {}))
        for name in sorted(result["survivors"]):
            flag = " (new)" if name in new_survivors else ""
            said = result["survivors"][name]
            moved = f" ({MOVED}: check its reason)" if said["status"] == MOVED else ""
            print(f"  survived{flag}{moved}: {name}: {' / '.join(said['diff'])}")
        for name, diff in sorted(result.pop("equivalent_diffs").items()):
            print(f"  equivalent: {name}: {' / '.join(diff)}")
        # A recorded module must not lose ground; one not recorded yet is reported only.
        if old and result["finished"] and (new_survivors or (
                old["score"] is not None and result["score"] is not None
                and result["score"] < old["score"])):
            failed.append(module)
        recorded[module] = ran[module] = result
        if args.write:  # after each module: a long run stopped midway keeps what it did
            write_docs({**load_recorded(), **ran})  # rows others wrote meanwhile are kept
    if too_long:
        print(f"mutation: not run, their last run longer than the budget left (rerun them with "
              f"--modules PATH --write): {', '.join(too_long)}")
    if skipped:
        print(f"mutation: budget spent; not run: {', '.join(skipped)}")
    if args.write:
        write_docs({module: rescore(r) for module, r in {**load_recorded(), **ran}.items()})
        print(f"wrote {DOCS_JSON.relative_to(ROOT)} and {DOCS_MD.relative_to(ROOT)}")
    if failed and not args.write:
        print(f"mutation: new survivors or a lower score in {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
