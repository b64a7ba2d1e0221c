"""What ``edgepe verify`` prints and writes for a report (edgepe/verify/report.py): each row, cell,
alignment and note below the table, and the JSON report's null for non-finite numbers (issue 33:
the mutation run of that module runs these first). Reports are built by hand here, so every
expected text is known without running a runtime.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
from rich.console import Console

from edgepe.contract.errors import OutputPathError
from edgepe.verify import Report
from edgepe.verify import report as render_mod
from edgepe.verify.compare import CompareResult, Mismatch, Tolerance


@dataclass
class _Rebuilt:  # the fields render and as_dict read of edgepe.rebuild.Rebuilt
    reproduced: bool
    ok: bool
    difference: str | None = None
    note: str = ""
    same_version: bool = True
    unchecked: tuple = ()


MANIFEST = {"scheme": "sinusoidal", "mode": "compute", "format": "onnx", "dtype": "float32",
            "max_len": 512, "kind": "pe"}
SHA = "a" * 64


def _text(report) -> list[str]:
    console = Console(width=400, record=True, color_system=None, force_terminal=False)
    render_mod.render(report, console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def _cells(lines, first) -> list[str]:
    """The cells (padding kept) of the table row whose first cell is ``first``."""
    for line in lines:
        cells = line.split("│")[1:-1]
        if cells and cells[0].strip() == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n" + "\n".join(lines))


def _right(cell, value) -> bool:
    return cell[:-1].endswith(value) and cell.strip() == value


def _left(cell, value) -> bool:
    return cell[1:].startswith(value) and cell.strip() == value


def _result(**changes) -> CompareResult:
    fields = dict(runtime="cpu", tolerance=Tolerance(0.0, 1e-6, source="manifest"),
                  elements=1024, positions=512, max_abs_err=2.5e-7, mean_abs_err=0.0,
                  max_rel_err=1.25e-3, mean_rel_err=4e-5,
                  placement={"CPUExecutionProvider": {"Sin": 1, "Mul": 2}})
    return CompareResult(**{**fields, **changes})


def test_title_rows_cells_and_alignment_of_a_passing_report():
    report = Report("pe.onnx", MANIFEST, SHA, SHA, [_result()],
                    rebuild=_Rebuilt(reproduced=True, ok=True))
    lines = _text(report)
    assert lines[0] == "pe.onnx: sinusoidal compute onnx float32, max_len 512"
    header = next(line for line in lines if "runtime" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "runtime", "positions", "max abs", "mean abs", "max rel", "mean rel", "mismatching",
        "tolerance", "placement", "result"]
    rebuild = _cells(lines, "rebuild")
    assert rebuild[-1].strip() == "PASS" and all(not c.strip() for c in rebuild[1:-1])
    sha = _cells(lines, "sha256")
    assert sha[-1].strip() == "PASS" and all(not c.strip() for c in sha[1:-1])
    cpu = _cells(lines, "cpu")
    assert _left(cpu[0], "cpu")
    assert _right(cpu[1], "512")
    assert _right(cpu[2], "2.5e-07")   # max abs, .3g
    assert _right(cpu[3], "0")         # an error of exactly 0 prints as 0
    assert _right(cpu[4], "0.00125")
    assert _right(cpu[5], "4e-05")
    assert _right(cpu[6], "0 of 1024")
    assert _left(cpu[7], "atol 1e-06")
    assert _left(cpu[8], "CPU 3")      # provider without its suffix, nodes summed
    assert _left(cpu[9], "PASS")
    assert lines[-1] == "abs, rel: error against the reference"
    assert len(lines) == 9  # title, 3 rules, header, 3 rows, caption: nothing below the table


def test_title_names_int8_and_quick_and_an_absent_placement_is_a_dash():
    manifest = {**MANIFEST, "quant": {"scheme": "int8"}}
    report = Report("q.onnx", manifest, SHA, SHA, [_result(placement=None)], quick=True,
                    rebuild=_Rebuilt(reproduced=True, ok=True))
    lines = _text(report)
    assert lines[0] == "q.onnx: sinusoidal compute onnx float32 int8, max_len 512 (quick)"
    assert _left(_cells(lines, "cpu")[8], "-")
    assert render_mod._placement({}) == "-"
    assert render_mod._placement({"CUDAExecutionProvider": {"Add": 2},
                                  "CPUExecutionProvider": {"Cast": 1}}) == "CUDA 2, CPU 1"


def test_rebuild_states_and_the_line_below_when_not_reproduced():
    other = _Rebuilt(reproduced=False, ok=True, note="built by edgepe 0.0.1: swept instead")
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [_result()], rebuild=other))
    assert _cells(lines, "rebuild")[-1].strip() == "not reproduced"
    assert "rebuild: built by edgepe 0.0.1: swept instead" in lines
    failed = _Rebuilt(reproduced=False, ok=False, difference="node 3 differs", note="n")
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [_result()], rebuild=failed))
    assert _cells(lines, "rebuild")[-1].strip() == "FAIL"
    assert "rebuild: node 3 differs" in lines  # the difference before the note
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [_result()], rebuild=None))
    assert not any(line.split("│")[1:2] == [" rebuild "] for line in lines)
    assert not any(line.startswith("rebuild:") for line in lines)


def test_a_sha256_mismatch_row_and_its_line():
    lines = _text(Report("pe.onnx", MANIFEST, SHA, "b" * 64, [_result()],
                         rebuild=_Rebuilt(reproduced=True, ok=True)))
    assert _cells(lines, "sha256")[-1].strip() == "FAIL (MISMATCH)"
    assert (f"sha256: the file hashes to {'b' * 64}, the manifest says {SHA}: it is not the "
            "artifact its manifest describes") in lines


def test_a_runtime_error_row_has_only_its_tolerance_and_verdict():
    result = _result(error="onnxruntime: invalid graph")
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [result]))
    cells = _cells(lines, "cpu")
    assert [c.strip() for c in cells] == ["cpu", "", "", "", "", "", "", "atol 1e-06", "",
                                          "FAIL"]
    assert "cpu: onnxruntime: invalid graph" in lines


def test_mismatch_lines_the_rest_counted_and_the_columns_most_first():
    first = [Mismatch("position 3 column 1", 0.5, 0.25), Mismatch("position 4 column 2", 1, 2)]
    result = _result(mismatches=12, first_mismatches=first,
                     mismatches_by_column=dict(enumerate((1, 5, 5, 2, 1, 1, 1, 1, 1, 1))))
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [result]))
    assert _right(_cells(lines, "cpu")[6], "12 of 1024")
    assert _left(_cells(lines, "cpu")[9], "FAIL")
    below = lines[lines.index("abs, rel: error against the reference") + 1:]
    assert below == [
        "cpu: position 3 column 1: got 0.5, expected 0.25",
        "cpu: position 4 column 2: got 1, expected 2",
        "cpu: ... 10 more mismatching elements",
        # by count, then column; 8 shown, the other 2 counted. The unit is the word before the
        # index in the first mismatch's place.
        "cpu: mismatching elements by column: column 1 (5), column 2 (5), column 3 (2), column "
        "0 (1), column 4 (1), column 5 (1), column 6 (1), column 7 (1) and 2 more",
    ]


def test_an_error_row_does_not_hide_the_runtimes_after_it():
    results = [_result(runtime="ref", error="failed"), _result(runtime="cpu")]
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, results))
    assert _cells(lines, "ref")[-1].strip() == "FAIL"
    assert _cells(lines, "cpu")[-1].strip() == "PASS"


def test_columns_with_equal_counts_sort_by_column_and_nine_show_one_more():
    result = _result(mismatches=9, mismatches_by_column={c: 1 for c in (8, 7, 6, 5, 4, 3, 2, 1, 0)})
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [result]))
    assert lines[-1] == ("cpu: mismatching elements by column: column 0 (1), column 1 (1), "
                         "column 2 (1), column 3 (1), column 4 (1), column 5 (1), column 6 (1), "
                         "column 7 (1) and 1 more")


def test_the_unit_is_the_word_before_the_index_of_the_first_mismatch():
    first = [Mismatch("position 3 (clamped to 2) channel 1", 1, 0),
             Mismatch("position 4 lane 2", 1, 0)]
    result = _result(mismatches=2, first_mismatches=first, mismatches_by_column={1: 1, 2: 1})
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [result]))
    assert lines[-1] == "cpu: mismatching elements by channel: channel 1 (1), channel 2 (1)"


def test_below_the_table_nothing_is_highlighted_but_the_placement_error():
    first = [Mismatch("position 3 column 1", 0.5, 0.25)]
    results = [_result(mismatches=3, first_mismatches=first, mismatches_by_column={1: 3},
                       placement_note="2 nodes [Sin] on CPU (0.5 of them)"),
               _result(runtime="ref", error="shape [2, 3] != [2, 4]")]
    console = Console(width=400, record=True, color_system="standard", force_terminal=True)
    other = _Rebuilt(reproduced=False, ok=True, note="edgepe 0.0.1 [1, 2]")
    report = Report("pe.onnx", MANIFEST, SHA, "1" * 64, results, rebuild=other)  # a number
    render_mod.render(report, console)
    lines = console.export_text(styles=True).splitlines()
    caption = next(i for i, line in enumerate(lines) if "error against the reference" in line)
    below = lines[caption + 1:]
    assert len(below) == 7  # rebuild, sha256, 1 mismatch, 2 more, by column, note, ref's error
    assert not any("\x1b" in line for line in below), below


def test_mismatch_units_heads_for_bias_and_column_without_a_first_mismatch():
    bias = {**MANIFEST, "kind": "bias"}
    result = _result(mismatches=1, mismatches_by_column={0: 1},
                     first_mismatches=[Mismatch("query 0 key 1 at 0", 1.0, 0.0)])
    lines = _text(Report("b.onnx", bias, SHA, SHA, [result]))
    assert lines[-1] == "cpu: mismatching elements by head: head 0 (1)"
    no_first = _result(mismatches=2, mismatches_by_column={3: 2})
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [no_first]))
    assert lines[-2:] == ["cpu: ... 2 more mismatching elements",
                          "cpu: mismatching elements by column: column 3 (2)"]
    exactly_eight = _result(mismatches=8, mismatches_by_column={c: 1 for c in range(8)})
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [exactly_eight]))
    assert lines[-1].endswith("column 7 (1)")  # 8 shown: nothing more to count


def test_placement_error_in_red_wins_over_the_note():
    result = _result(placement_error="2 nodes fell back to CPU", placement_note="note")
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [result]))
    assert lines[-1] == "cpu: 2 nodes fell back to CPU"
    console = Console(width=400, record=True, color_system="standard", force_terminal=True)
    render_mod.render(Report("pe.onnx", MANIFEST, SHA, SHA, [result]), console)
    assert "\x1b[31m2 nodes fell back to CPU" in console.export_text(styles=True)
    lines = _text(Report("pe.onnx", MANIFEST, SHA, SHA, [_result(placement_note="all on CPU")]))
    assert lines[-1] == "cpu: all on CPU"


def test_number_columns_never_wrap_and_text_columns_may():
    placement = {f"Provider{i}ExecutionProvider": {"Add": 1} for i in range(6)}
    result = _result(placement=placement, tolerance=Tolerance(0.0, 1e-6, 2, "manifest"),
                     max_abs_err=1.23456e-7, mean_abs_err=2.5e-8)
    console = Console(width=120, record=True, color_system=None)
    render_mod.render(Report("pe.onnx", MANIFEST, SHA, SHA, [result]), console)
    text = console.export_text()
    for value in ("1.23e-07", "2.5e-08", "0.00125", "4e-05", "0 of 1024",
                  "atol 1e-06, +2 fp16 ulp"):
        assert value in text, value  # on one line: no_wrap
    assert "Provider0 1, Provider1 1, Provider2 1" not in text  # the placement cell wraps


def test_values_are_printed_without_rich_markup_or_highlighting():
    console = Console(width=400, record=True, color_system="standard", force_terminal=True)
    result = _result(error="shape [2, 3] != [2, 4]")
    render_mod.render(Report("pe.onnx", MANIFEST, SHA, SHA, [result]), console)
    text = console.export_text(styles=True)
    assert "cpu: shape [2, 3] != [2, 4]\n" in text  # no number or bracket highlighted
    other = _Rebuilt(reproduced=False, ok=False, difference="[red]x[/] 3")
    console = Console(width=400, record=True, color_system="standard", force_terminal=True)
    render_mod.render(Report("pe.onnx", MANIFEST, SHA, SHA, [_result()], rebuild=other),
                      console)
    assert "rebuild: [red]x[/] 3\n" in console.export_text(styles=True)


def test_to_json_turns_non_finite_numbers_into_null_at_any_depth():
    assert render_mod._finite(math.nan) is None
    assert render_mod._finite(math.inf) is None and render_mod._finite(-math.inf) is None
    assert render_mod._finite(1.5) == 1.5 and render_mod._finite(0) == 0
    assert render_mod._finite({"a": [1.0, math.inf, {"b": math.nan}], "c": "x"}) == {
        "a": [1.0, None, {"b": None}], "c": "x"}
    result = _result(max_abs_err=math.inf, max_rel_err=math.nan)
    report = Report("pe.onnx", MANIFEST, SHA, SHA, [result])
    text = render_mod.to_json(report)
    assert text.endswith("}\n") and "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["results"][0]["max_abs_err"] is None and data["results"][0]["max_rel_err"] is None
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_write_json_writes_the_report_and_refuses_the_artifact(tmp_path):
    artifact = tmp_path / "pe.onnx"
    artifact.write_bytes(b"model")
    report = Report(str(artifact), MANIFEST, SHA, SHA, [_result()])
    out = tmp_path / "report.json"
    render_mod.write_json(report, out)
    assert out.read_text() == render_mod.to_json(report)
    with pytest.raises(OutputPathError):
        render_mod.write_json(report, out)  # exists: only with force
    render_mod.write_json(report, out, force=True)
    with pytest.raises(OutputPathError) as info:
        render_mod.write_json(report, artifact, force=True)  # never the artifact
    assert str(info.value).startswith(f"--json {str(artifact)!r} is the input ")
    assert artifact.read_bytes() == b"model"
