"""rebuild's comparisons, one difference at a time: each field, each type (issue 33).

A planted bug that skipped one field, one that let ``1.0 == 1`` pass across types and one that did
not flag a longer file all survived the suite: here each field of a real manifest is changed
alone, each type swapped for its look-alike, and the file made one byte longer, shorter or
different at a known offset.
"""

from __future__ import annotations

import copy
import io

import pytest

from edgepe import api, rebuild
from edgepe.contract.config import DEFAULT_TABLE_CAP
from edgepe.export import compare as compare_mod
from edgepe.export import prepare

# ---- first_difference: every type against its look-alike --------------------------------------


@pytest.mark.parametrize(("a", "b"), [
    (1.0, 1), (1, 1.0), (True, 1), (1, True), (False, 0), (0, None), (None, False), ("1", 1),
    ("", None), ([], {}), ([1], (1,)), (0.1 + 0.2, 0.3), (-0.0, 0), ([1, 2], [1, 2, 3]),
    ([1, 2, 3], [1, 2]), ({"a": 1}, [("a", 1)]), ("a", "A"),
], ids=repr)
def test_look_alikes_differ(a, b):
    assert compare_mod.first_difference({"x": a}, {"x": b}) is not None
    assert compare_mod.first_difference({"x": a}, {"x": b}).startswith("x")


@pytest.mark.parametrize("value", [1, 1.5, True, None, "s", [1, [2.0]], {"k": [True]}, -0.0],
                         ids=repr)
def test_equal_values_are_equal(value):
    assert compare_mod.first_difference({"x": value}, {"x": copy.deepcopy(value)}) is None


def test_missing_and_extra_fields_are_named():
    assert compare_mod.first_difference({"a": 1}, {"a": 1, "b": 2}) == \
        "b (missing in the file's manifest)"
    assert compare_mod.first_difference({"a": 1, "b": 2}, {"a": 1}) == \
        "b (extra in the file's manifest)"
    assert compare_mod.first_difference({"q": {"a": 1}}, {"q": {"a": 1, "z": None}}) == \
        "q.z (missing in the file's manifest)"


def test_nested_difference_names_the_path_and_values():
    a = {"quant": {"scale": [0.5, 0.25, 0.125]}, "z": 1}
    b = {"quant": {"scale": [0.5, 0.25, 0.126]}, "z": 2}
    assert compare_mod.first_difference(a, b) == "quant.scale[2]: 0.125 != rebuilt 0.126"
    assert compare_mod.first_difference({"l": [1.0]}, {"l": [1]}) == "l[0]: 1.0 != rebuilt 1"
    assert compare_mod.first_difference(3, 3.0) == "the top level: 3 != rebuilt 3.0"


# ---- a real manifest: each field changed alone -----------------------------------------------


@pytest.fixture(scope="module")
def built():
    config = api.make_config("binary", 16, quantize="int8", mode="table", format="npy")
    prepared = prepare(config)
    buffer = io.BytesIO()
    prepared.write(buffer)
    data = buffer.getvalue()
    _, manifest = compare_mod.compare(io.BytesIO(data), None, dict(prepared.manifest), prepared)
    return data, manifest, prepared


def _leaves(value, where=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*where, key))
    elif isinstance(value, list) and value:
        yield from _leaves(value[0], (*where, 0))
        if len(value) > 1:
            yield from _leaves(value[-1], (*where, len(value) - 1))
    else:
        yield where, value


def _changed(value):
    """Look-alikes of ``value`` of another type or value (each must be told apart)."""
    if isinstance(value, bool):
        return [not value, int(value)]
    if isinstance(value, int):
        return [value + 1, float(value), str(value)]
    if isinstance(value, float):
        return [value * (1 + 2**-40) if value else 1e-300, str(value)] + (
            [int(value)] if value == int(value) else [])
    if isinstance(value, str):
        return [value + "x", None]
    if value is None:
        return [0, ""]
    return [None]


def test_the_untouched_manifest_compares_equal(built):
    data, manifest, prepared = built
    assert compare_mod.compare(io.BytesIO(data), None, manifest, prepared)[0] is None


def test_each_field_changed_alone_is_named(built):
    data, manifest, prepared = built
    leaves = list(_leaves(manifest))
    assert len(leaves) > 20  # int8 npy: scheme, inputs, quant scales, positions, tolerance...
    for path, value in leaves:
        for other in _changed(value):
            forged = copy.deepcopy(manifest)
            target = forged
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = other
            difference, _ = compare_mod.compare(io.BytesIO(data), None, forged, prepared)
            dotted = ".".join(str(k) for k in path if not isinstance(k, int))
            assert difference is not None, (path, value, other)
            assert dotted in difference, (difference, path)


def test_each_field_removed_alone_is_named(built):
    data, manifest, prepared = built
    for key in manifest:
        forged = {k: v for k, v in manifest.items() if k != key}
        difference, _ = compare_mod.compare(io.BytesIO(data), None, forged, prepared)
        assert difference == (f"the manifest differs from the rebuilt one at {key} (missing in "
                              "the file's manifest)")
    difference, _ = compare_mod.compare(io.BytesIO(data), None, {**manifest, "zz": 1}, prepared)
    assert difference.endswith("at zz (extra in the file's manifest)")


def test_checkpoint_path_is_ignored_only_when_asked(built):
    data, manifest, prepared = built
    a = {**manifest, "checkpoint": {"path": "/a", "sha256": "0" * 64}}
    b = {**manifest, "checkpoint": {"path": "/b", "sha256": "0" * 64}}
    clean = compare_mod._comparable
    assert compare_mod.first_difference(clean(a), clean(b)) is None
    assert compare_mod.first_difference(a, b) == 'checkpoint.path: "/a" != rebuilt "/b"'
    c = {**manifest, "checkpoint": {"path": "/a", "sha256": "1" * 64}}
    assert compare_mod.first_difference(compare_mod._comparable(a), compare_mod._comparable(c)) \
        .startswith("checkpoint.sha256")


# ---- the file: longer, shorter, one byte different -----------------------------------------


@pytest.mark.parametrize(("change", "offset"), [
    ("longer", "end"), ("longer-by-zero-byte", "end"), ("shorter", "end-1"), ("first", 0),
    ("last", "end-1"), ("middle", 100),
])
def test_file_differences_give_the_offset(built, change, offset):
    data, manifest, prepared = built
    end = len(data)
    forged = {
        "longer": data + b"x", "longer-by-zero-byte": data + b"\0", "shorter": data[:-1],
        "first": bytes([data[0] ^ 1]) + data[1:], "last": data[:-1] + bytes([data[-1] ^ 1]),
        "middle": data[:100] + bytes([data[100] ^ 0x80]) + data[101:],
    }[change]
    where = {"end": end, "end-1": end - 1}.get(offset, offset)
    difference, _ = compare_mod.compare(io.BytesIO(forged), None, manifest, prepared)
    assert difference == f"the file differs from the rebuild at byte {where}"


def test_compare_writer_offsets():
    def offset(file: bytes, writes: list[bytes]):
        sink = compare_mod._CompareWriter(io.BytesIO(file))
        for chunk in writes:
            sink.write(chunk)
        return sink.finish()

    assert offset(b"abcdef", [b"abc", b"def"]) is None
    assert offset(b"abcdefg", [b"abc", b"def"]) == 6
    assert offset(b"abcde", [b"abc", b"def"]) == 5
    assert offset(b"abcdXf", [b"abc", b"def"]) == 4
    assert offset(b"", [b"a"]) == 0
    assert offset(b"a", []) == 0
    assert offset(b"", []) is None


# ---- looser: each bound field alone ------------------------------------------------------------


@pytest.mark.parametrize(("section", "key"), [("tolerance", "rtol"), ("tolerance", "atol"),
                                              ("quant", "bound"),
                                              ("quant", "bound_all_positions")])
def test_looser_checks_each_field_alone(section, key):
    ours = {"tolerance": {"rtol": 1e-6, "atol": 1e-6},
            "quant": {"bound": 0.01, "bound_all_positions": 0.02}}
    assert rebuild.looser(copy.deepcopy(ours), ours) is None
    tighter = copy.deepcopy(ours)
    tighter[section][key] = ours[section][key] / 2
    assert rebuild.looser(tighter, ours) is None
    looser = copy.deepcopy(ours)
    looser[section][key] = ours[section][key] * (1 + 1e-9)
    assert rebuild.looser(looser, ours) == (
        f"the manifest states {section}.{key} {looser[section][key]}, looser than this "
        f"edgepe's {ours[section][key]}")
    absent = copy.deepcopy(ours)
    del absent[section][key]
    assert rebuild.looser(looser, absent).startswith(f"the manifest states {section}.{key}")
    assert rebuild.looser({}, ours) is None


# ---- the rebuild's table cap -------------------------------------------------------------------


def test_rebuild_cap_formula():
    slack = 65536
    assert rebuild._SLACK_BYTES == slack
    assert rebuild._cap({"mode": "table"}, 1000) == 4 * 1000 + slack
    assert rebuild._cap({"mode": "compute"}, 1000) == DEFAULT_TABLE_CAP
    big = DEFAULT_TABLE_CAP  # a compute graph bigger than the cap / 4: the stored bound wins
    assert rebuild._cap({"mode": "compute"}, big) == 4 * big + slack
