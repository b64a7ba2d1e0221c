"""The guide's worked examples, reproduced by the reference modules.

Bit order is LSB-first (column k is bit k, guide 3.2/3.3). Where a printed example disagrees with
its own formula, the formula wins and the test says how the print differs: 3.7 prints group 0
MSB-first, 6.2 prints the bits MSB-first, and 4.3's sinusoidal row has the wrong sign on
cos(10) (and wrong values past it).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from edgepe.schemes import build, resolve


def encode(scheme_id: str, max_len: int, positions, **kw) -> list[list[float]]:
    cfg = resolve(scheme_id, max_len, **kw)
    with torch.no_grad():
        return build(cfg).encode(torch.tensor(positions, dtype=torch.int64)).tolist()


def msb_first(text: str) -> list[int]:
    """The guide's printed binary string (MSB first) as LSB-first bits."""
    return [int(c) for c in reversed(text)]


# Guide 3.3, copied: "Reading bits from right to left (LSB to MSB)".
GUIDE_3_3 = """
Position  0: [0, 0, 0, 0]  (binary: 0000)
Position  1: [1, 0, 0, 0]  (binary: 0001)
Position  2: [0, 1, 0, 0]  (binary: 0010)
Position  3: [1, 1, 0, 0]  (binary: 0011)
Position  4: [0, 0, 1, 0]  (binary: 0100)
Position  5: [1, 0, 1, 0]  (binary: 0101)
Position  6: [0, 1, 1, 0]  (binary: 0110)
Position  7: [1, 1, 1, 0]  (binary: 0111)
Position  8: [0, 0, 0, 1]  (binary: 1000)
Position  9: [1, 0, 0, 1]  (binary: 1001)
Position 10: [0, 1, 0, 1]  (binary: 1010)
Position 11: [1, 1, 0, 1]  (binary: 1011)
Position 12: [0, 0, 1, 1]  (binary: 1100)
Position 13: [1, 0, 1, 1]  (binary: 1101)
Position 14: [0, 1, 1, 1]  (binary: 1110)
Position 15: [1, 1, 1, 1]  (binary: 1111)
"""


def parse_3_3() -> list[tuple[int, list[int], str]]:
    rows = []
    for line in GUIDE_3_3.strip().splitlines():
        head, rest = line.split(":", 1)
        vector, binary = rest.split("(binary:")
        rows.append((int(head.split()[1]), json.loads(vector), binary.strip(" )")))
    return rows


def test_guide_3_3_table_lsb_first():
    rows = parse_3_3()
    assert [p for p, _, _ in rows] == list(range(16))
    # "Maximum position: 15 (requires 4 bits)": max_len 15 has n = 4, and 15 fits in 4 bits.
    got = encode("binary-bits", 15, list(range(16)), d_model=4)
    for pos, vector, binary in rows:
        assert got[pos] == vector, pos
        assert vector == msb_first(binary), pos  # the printed binary is the same bits, MSB first
    # max_len 16 (positions 0..15) takes n = ceil(log2(17)) = 5 bits, as in the demo: the same
    # four columns and a fifth that is 0 for every position in range.
    wide = encode("binary-bits", 16, list(range(16)))
    assert [row[:4] for row in wide] == [v for _, v, _ in rows]
    assert all(row[4] == 0 for row in wide)


def test_guide_2_1_integer():
    got = encode("integer", 100, [0, 1, 2, 99], d_model=512, params={"C": 100})
    for row, printed in zip(got, [0.00, 0.01, 0.02, 0.99], strict=True):
        assert len(row) == 512 and all(v == pytest.approx(printed, abs=5e-7) for v in row)


def test_guide_2_2_normalized_integer():
    got = encode("integer-norm", 10, list(range(10)), d_model=4)
    printed = {0: 0.000, 1: 0.111, 2: 0.222, 3: 0.333, 9: 1.000}
    for pos, value in printed.items():
        assert got[pos] == pytest.approx([value] * 4, abs=5e-4)
    assert got[9] == [1.0] * 4  # 9/9 is exactly 1
    assert all(row == pytest.approx([pos / 9] * 4, rel=1e-7) for pos, row in enumerate(got))


def test_guide_2_3_multiscale():
    (row,) = encode("integer-multiscale", 10, [5], d_model=4, params={"alpha": 1})
    assert row == pytest.approx([0.000, 0.185, 0.370, 0.556], abs=5e-4)
    assert row == pytest.approx([5 / 9 * i / 3 for i in range(4)], rel=3e-7)


def test_guide_3_5_signed_and_smooth():
    # "Binary: [1, 0, 1, 1] -> Normalized: [+1, -1, +1, +1]": those are the LSB-first bits of 13.
    assert encode("binary-bits", 15, [13], d_model=4) == [[1, 0, 1, 1]]
    assert encode("binary-signed", 15, [13], d_model=4) == [[1, -1, 1, 1]]
    # c = 5: bit 0 -> sigma(-5) = 0.007, bit 1 -> sigma(+5) = 0.993. Position 1 has bits [1, 0].
    (row,) = encode("binary-smooth", 3, [1], params={"c": 5})
    assert row == pytest.approx([0.993, 0.007], abs=5e-4)
    assert row == pytest.approx([1 / (1 + math.exp(-5)), 1 / (1 + math.exp(5))], rel=3e-7)


def test_guide_3_4_and_3_6_hamming_examples():
    def hamming(a: list[float], b: list[float]) -> int:
        return sum(x != y for x, y in zip(a, b, strict=True))

    b3, b4, b5 = encode("binary-bits", 15, [3, 4, 5], d_model=4)
    assert b3 == [1, 1, 0, 0] and b5 == [1, 0, 1, 0] and hamming(b3, b5) == 2  # guide 3.4
    assert hamming(b3, b4) == 3  # guide 3.6: "Position 3: 0011, Position 4: 0100"


def test_guide_3_6_gray_table():
    printed = ["0000", "0001", "0011", "0010", "0110", "0111", "0101", "0100", "1100"]
    got = encode("gray", 15, list(range(9)), d_model=4)
    assert got == [msb_first(code) for code in printed]


def test_guide_3_7_multilevel_lsb_first():
    (row,) = encode("binary-multilevel", 14, [13], d_model=12, params={"groups": 3})
    assert row == [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0]
    # The guide prints [1,1,0,1, 0,1,1,0, 1,1,0,0]: group 0 is 13 = 1101 written MSB-first,
    # while groups 1 and 2 are written LSB-first (6 = 0110 reads the same both ways).
    printed = [1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0]
    assert row[:4] == printed[:4][::-1] and row[4:] == printed[4:]


def test_guide_4_3_integer_and_binary_rows():
    # "Integer (normalized): 0.909 x 8" is 10 / 11, i.e. pos / (L - 1) with L = 12.
    (row,) = encode("integer-norm", 12, [10], d_model=8)
    assert row == pytest.approx([0.909] * 8, abs=5e-4) and row == pytest.approx([10 / 11] * 8)
    # "Binary (position 10 = 1010): [0, 1, 0, 1, 0, 0, 0, 0]", LSB-first as printed.
    assert encode("binary-bits", 12, [10], d_model=8) == [[0, 1, 0, 1, 0, 0, 0, 0]]


def test_guide_4_3_sinusoidal_row_follows_the_formula_not_the_print():
    (row,) = encode("sinusoidal", 12, [10], d_model=8)
    # PE(10, 2i) = sin(10 / 10000^(2i/8)), PE(10, 2i+1) = cos(...): w = 1, 0.1, 0.01, 0.001.
    formula = [-0.544, -0.839, 0.841, 0.540, 0.100, 0.995, 0.010, 1.000]
    assert row == pytest.approx(formula, abs=5e-4)
    printed = [-0.544, 0.839, 0.010, 1.000, 0.000, 1.000, 0.000, 1.000]
    assert row[1] == pytest.approx(math.cos(10), abs=1e-6) and row[1] < 0 < printed[1]


def test_guide_5_1_hybrid():
    (row,) = encode("hybrid-int-binary", 10, [5], d_model=8)
    assert row[:4] == pytest.approx([0.556] * 4, abs=5e-4)
    assert row[:4] == pytest.approx([5 / 9] * 4, rel=1e-7)
    assert row[4:] == [1, 0, 1, 0]  # "5 = 0101" read LSB-first, as the guide prints it


def test_guide_5_4_hierarchical_characters():
    # Word 0, subword 0, characters 0, 1, 2 with 8, 8 and 4 bits.
    got = encode("hierarchical", 16, [[0, 0, 0], [0, 0, 1], [0, 0, 2]],
                 params={"widths": "8,8,4"})
    assert got == [[0] * 16 + [0, 0, 0, 0], [0] * 16 + [1, 0, 0, 0], [0] * 16 + [0, 1, 0, 0]]


def test_guide_6_2_binary_2d_lsb_first():
    (row,) = encode("binary-2d", 8, [[5, 3]], d_model=8)
    assert row == [1, 1, 0, 1, 1, 0, 0, 0]  # [x0, y0, x1, y1, ...] of x = 5, y = 3
    # The guide prints [0,0, 1,0, 0,1, 1,1]: the same pairs with bit 3 first (MSB-first).
    printed = [0, 0, 1, 0, 0, 1, 1, 1]
    pairs = [row[i:i + 2] for i in range(0, 8, 2)]
    assert [v for pair in reversed(pairs) for v in pair] == printed


def test_guide_6_4_hierarchical_document():
    (row,) = encode("hierarchical", 8, [[2, 3, 5]], params={"widths": "2,2,3"})
    assert row == [0, 1, 1, 1, 1, 0, 1]  # section 2 [0,1], paragraph 3 [1,1], sentence 5 [1,0,1]
