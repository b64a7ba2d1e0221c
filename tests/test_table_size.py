"""``graphs.table.check_table_size`` at its bound and each hint it gives (issue 33: the mutation
run of edgepe/graphs/table.py runs these with the goldens). Configs are built past make_config's
own check (the API's path), so the table module's refusal is the one shown.
"""

from __future__ import annotations

import pytest

from edgepe import api
from edgepe.contract.errors import BadParameterError
from edgepe.graphs import table


def _config(scheme, max_len, cap, **kw):
    base = api.make_config(scheme, max_len, mode="table", **kw)
    return base.__class__(**{**base.__dict__, "max_table_bytes": cap})


def test_a_table_of_exactly_the_cap_is_accepted_and_one_byte_less_refused():
    # sinusoidal 8 x 4 float32 = 128 bytes
    table.check_table_size(_config("sinusoidal", 8, 128, d_model=4))
    with pytest.raises(BadParameterError) as info:
        table.check_table_size(_config("sinusoidal", 8, 127, d_model=4))
    assert str(info.value) == (
        "the table of scheme 'sinusoidal' is 8 x 4 float32 = 128 bytes, over --max-table-bytes "
        "(127); use --mode compute (no table) or --dtype float16 or --quantize int8 or a larger "
        "--max-table-bytes")


def test_hints_of_an_exact_table_only_scheme_in_uint8():
    # gray has a compute mode and exact bits; binary-bits' uint8 table 8 x 4 = 32 bytes
    with pytest.raises(BadParameterError) as info:
        table.check_table_size(_config("gray", 8, 31, dtype="uint8"))
    assert str(info.value) == (
        "the table of scheme 'gray' is 8 x 4 uint8 = 32 bytes, over --max-table-bytes (31); "
        "use --mode compute (no table) or --format bin --dtype bit (bit-packed) or a larger "
        "--max-table-bytes")
    with pytest.raises(BadParameterError) as info:
        table.check_table_size(_config("learned", 8, 127, d_model=4))
    assert str(info.value).endswith("use --dtype float16 or --quantize int8 or a larger "
                                    "--max-table-bytes")  # learned has no compute mode


def test_the_onnx_file_limit_when_the_cap_is_above_it(monkeypatch):
    monkeypatch.setattr(table, "ONNX_TABLE_LIMIT", 100)
    with pytest.raises(BadParameterError) as info:
        table.check_table_size(_config("sinusoidal", 8, 10**6, d_model=4))
    assert str(info.value) == (
        "the table of scheme 'sinusoidal' is 8 x 4 float32 = 128 bytes, over the 2 GiB limit of "
        "an ONNX file (100); use --mode compute (no table) or --dtype float16 or --quantize int8")
