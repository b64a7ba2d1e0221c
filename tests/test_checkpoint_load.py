"""Loading checkpoints (edgepe.contract.checkpoint) called directly on small files made here with
torch.save and safetensors (issue 33: the mutmut survivors of that module; the CLI tests reach it
in subprocesses). Every refusal is one line naming the file and what was expected and found,
with the hint that would fit (a --checkpoint-key prefix, an implied --d-model, a --max-len).
"""

from __future__ import annotations

import hashlib
import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from edgepe.contract import checkpoint as ck
from edgepe.contract.errors import CheckpointError
from edgepe.schemes import build, resolve


def _binary(d_model: int = 8):
    return build(resolve("binary", 16, d_model=d_model))  # pe_binary [1, 16, 5], projection [d, 5]


def _state(module, **changes):
    state = {k: v.clone() for k, v in module.state_dict().items()}
    state.update(changes)
    return state


def _save(tmp_path, obj, name="c.pt"):
    path = tmp_path / name
    torch.save(obj, path)
    return path


def _message(call) -> str:
    with pytest.raises(CheckpointError) as exc:
        call()
    assert "\n" not in str(exc.value)
    return str(exc.value)


# ---- torch checkpoints --------------------------------------------------------------------------


def test_a_matching_state_dict_loads_bare_or_under_state_dict(tmp_path):
    source = _binary()
    torch.nn.init.normal_(source.projection.weight)
    for obj in (source.state_dict(), {"state_dict": source.state_dict(), "epoch": 3}):
        module = _binary()
        ck.load_into(module, _save(tmp_path, obj))
        assert torch.equal(module.projection.weight, source.projection.weight)


def test_entries_under_a_key_are_taken_with_the_prefix_removed(tmp_path):
    source = _binary()
    whole = {f"model.pos.{k}": v for k, v in source.state_dict().items()}
    whole["model.head.weight"] = torch.zeros(2, 2)
    path = _save(tmp_path, whole)
    for key in ("model.pos", "model.pos."):
        assert set(ck.read_state_dict(path, key)) == {"pe_binary", "projection.weight"}
    assert _message(lambda: ck.read_state_dict(path, "enc")) == (
        f"checkpoint {str(path)!r} has no entries under --checkpoint-key 'enc'; its prefixes: "
        "model")
    bare = _save(tmp_path, {"w": torch.zeros(1)}, "bare.pt")
    assert _message(lambda: ck.read_state_dict(bare, "enc")).endswith(
        "its prefixes: none (a bare state_dict)")


def test_a_checkpoint_under_a_prefix_names_the_key_to_pass(tmp_path):
    source = _binary()
    whole = {f"{p}.{k}": v for p in ("a", "b.c") for k, v in source.state_dict().items()}
    path = _save(tmp_path, whole)
    message = _message(lambda: ck.load_into(_binary(), path))
    assert message == (
        f"checkpoint {str(path)!r} does not fit scheme 'binary' (max_len 16, d_model 8): "
        "expected pe_binary [1, 16, 5], projection.weight [8, 5]; found a.pe_binary [1, 16, 5], "
        "a.projection.weight [8, 5], b.c.pe_binary [1, 16, 5], b.c.projection.weight [8, 5]; "
        "it holds them under a prefix: pass --checkpoint-key 'a' or 'b.c'")


def test_a_checkpoint_of_another_width_names_the_d_model_it_implies(tmp_path):
    path = _save(tmp_path, _binary(12).state_dict())
    assert _message(lambda: ck.load_into(_binary(), path)).endswith(
        "found pe_binary [1, 16, 5], projection.weight [12, 5]; its shapes imply --d-model 12")
    # shapes that differ elsewhere imply nothing
    other = _state(_binary(), **{"projection.weight": torch.zeros(8, 6)})
    path = _save(tmp_path, other, "o.pt")
    assert _message(lambda: ck.load_into(_binary(), path)).endswith(
        "found pe_binary [1, 16, 5], projection.weight [8, 6]")


def test_implied_d_model():
    assert ck._implied_d_model({"w": (8, 5)}, {"w": (12, 5)}, 8) == 12
    assert ck._implied_d_model({"w": (8, 5), "v": (8,)}, {"w": (12, 5), "v": (12,)}, 8) == 12
    assert ck._implied_d_model({"w": (8, 5), "v": (8,)}, {"w": (12, 5), "v": (16,)}, 8) is None
    assert ck._implied_d_model({"w": (8, 5)}, {"w": (8, 6)}, 8) is None  # not a d_model axis
    assert ck._implied_d_model({"w": (8, 5)}, {"w": (12,)}, 8) is None  # another rank
    assert ck._implied_d_model({"w": (8, 5)}, {"x": (8, 5)}, 8) is None  # another name
    assert ck._implied_d_model({"w": (8, 5)}, {"w": (8, 5)}, 8) is None  # nothing differs


def test_prefixes():
    assert ck._prefixes({"w": 1, "v": 1}, {"a.w": 1, "a.v": 1, "b.w": 1}) == ["a"]
    assert ck._prefixes({"w": 1}, {"x.y.w": 1, "z.w": 1, "w": 1, "aw": 1}) == ["x.y", "z"]
    assert ck._prefixes({"w": 1}, {"q": 1}) == []


def test_a_whole_models_names_are_cut_to_eight(tmp_path):
    state = {f"layer{i:02d}.weight": torch.zeros(1) for i in range(11)}
    path = _save(tmp_path, state)
    message = _message(lambda: ck.load_into(_binary(), path))
    # the first 8 names, and a count of the rest (sorted with them: '.' comes first)
    assert message.endswith("found ... (3 more) [], " + ", ".join(
        f"layer{i:02d}.weight [1]" for i in range(8)))
    eight = _save(tmp_path, {f"l{i}": torch.zeros(1) for i in range(8)}, "e.pt")
    assert "more" not in _message(lambda: ck.load_into(_binary(), eight))


def test_non_finite_weights_and_changed_buffers_are_refused(tmp_path):
    module = _binary()
    weight = torch.zeros(8, 5)
    weight[3, 1] = float("nan")
    path = _save(tmp_path, _state(module, **{"projection.weight": weight}))
    assert _message(lambda: ck.load_into(_binary(), path)) == (
        f"checkpoint {str(path)!r}: projection.weight holds NaN or Inf values")
    weight[3, 1] = float("-inf")
    path = _save(tmp_path, _state(module, **{"projection.weight": weight}), "inf.pt")
    assert "projection.weight holds NaN or Inf values" in _message(
        lambda: ck.load_into(_binary(), path))
    table = module.pe_binary.clone()
    table[0, 3, 0] = 1 - table[0, 3, 0]
    path = _save(tmp_path, _state(module, pe_binary=table), "buf.pt")
    assert _message(lambda: ck.load_into(_binary(), path)) == (
        f"checkpoint {str(path)!r}: buffer pe_binary differs from what scheme 'binary' computes "
        "for this configuration")
    # a buffer saved in another dtype but equal in value is fine, and loads in the module's dtype
    path = _save(tmp_path, _state(module, pe_binary=module.pe_binary.double(),
                                  **{"projection.weight": torch.ones(8, 5).double()}), "f64.pt")
    loaded = _binary()
    ck.load_into(loaded, path)
    assert loaded.projection.weight.dtype == torch.float32
    assert torch.equal(loaded.projection.weight, torch.ones(8, 5))


@pytest.mark.parametrize(("obj", "why"), [
    ([torch.zeros(1)], "does not hold a state_dict (a mapping of names to tensors)"),
    ({"w": [1.0]}, "does not hold a state_dict (a mapping of names to tensors)"),
    ({1: torch.zeros(1)}, "does not hold a state_dict (a mapping of names to tensors)"),
    ({"state_dict": [1]}, "does not hold a state_dict (a mapping of names to tensors)"),
])
def test_what_is_not_a_state_dict_is_refused(tmp_path, obj, why):
    path = _save(tmp_path, obj)
    assert _message(lambda: ck.read_state_dict(path)) == f"checkpoint {str(path)!r} {why}"


def _quantized():
    import warnings

    with warnings.catch_warnings():  # torch deprecates making quantized tensors
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.zeros(2), 0.1, 0, torch.qint8)


ALLOWED = ("bfloat16, bool, float16, float32, float64, int16, int32, int64, int8, uint8")


@pytest.mark.parametrize(("tensor", "kind"), [
    (torch.zeros(2, dtype=torch.complex64), "complex64"),
    (torch.zeros(2, 2).to_sparse(), "sparse_coo (not dense)"),
    (_quantized(), "quantized qint8"),
])
def test_tensors_that_are_not_dense_real_cpu_data_are_refused(tmp_path, tensor, kind):
    path = _save(tmp_path, {"w": tensor})
    assert _message(lambda: ck.read_state_dict(path)) == (
        f"checkpoint {str(path)!r}: w is a {kind} tensor; edgepe takes dense CPU tensors of "
        f"{ALLOWED}")


def test_a_meta_tensor_is_named():
    allowed = ck._real_dtypes(torch)
    assert ck._unusable(torch.empty(2, device="meta"), allowed) == "meta (no data)"
    for dtype in allowed:
        assert ck._unusable(torch.zeros(1, dtype=dtype), allowed) is None


def test_unreadable_torch_files(tmp_path):
    path = tmp_path / "junk.pt"
    path.write_bytes(b"not a checkpoint at all")
    assert _message(lambda: ck.read_state_dict(path)).startswith(
        f"checkpoint {str(path)!r} was refused by the safe loader (weights_only=True): Weights "
        "only load failed.")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert _message(lambda: ck.read_state_dict(empty)) == (
        f"checkpoint {str(empty)!r} is not a readable torch checkpoint (EOFError)")
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1), "f": print}, evil)  # a pickled function: code to run
    assert _message(lambda: ck.read_state_dict(evil)).startswith(
        f"checkpoint {str(evil)!r} was refused by the safe loader (weights_only=True): ")
    assert _message(lambda: ck.read_state_dict(tmp_path / "none.pt")) == (
        f"checkpoint {str(tmp_path / 'none.pt')!r} does not exist or is not a file")
    assert _message(lambda: ck.read_state_dict(tmp_path)) == (
        f"checkpoint {str(tmp_path)!r} does not exist or is not a file")


def test_sha256_file_hashes_every_block(tmp_path):
    data = bytes(range(256)) * (5 << 12)  # 5 MiB: several 1 MiB blocks
    (tmp_path / "f").write_bytes(data)
    assert ck.sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


# ---- safetensors --------------------------------------------------------------------------------


def _safetensors(tmp_path, header: dict | bytes, data: bytes = b"", length: int | None = None,
                 name="h.safetensors"):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path = tmp_path / name
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def test_a_safetensors_checkpoint_loads_by_key(tmp_path):
    source = _binary()
    torch.nn.init.normal_(source.projection.weight)
    path = tmp_path / "m.safetensors"
    save_file({**{f"pos.{k}": v.contiguous() for k, v in source.state_dict().items()},
               "head.w": torch.zeros(3, 2)}, str(path))
    assert ck.is_safetensors(path)
    assert ck.tensor_shapes(path) == {"pos.pe_binary": (1, 16, 5), "pos.projection.weight": (8, 5),
                                      "head.w": (3, 2)}
    module = _binary()
    ck.load_into(module, path, key="pos")
    assert torch.equal(module.projection.weight, source.projection.weight)
    assert set(ck.read_state_dict(path)) == {"pos.pe_binary", "pos.projection.weight", "head.w"}


def test_the_safetensors_header_length_is_bounded_by_the_file_and_16_mib(tmp_path):
    assert ck.SAFETENSORS_HEADER_LIMIT == 16 << 20
    fits = _safetensors(tmp_path, {})
    assert ck.safetensors_header(fits) == {}  # length + 8 == size: fits exactly
    for length, size in ((3, 10), (16 << 20 + 1, None)):
        path = _safetensors(tmp_path, b"{}", length=length, name=f"{length}.safetensors")
        size = path.stat().st_size
        assert _message(lambda p=path: ck.safetensors_header(p)) == (
            f"checkpoint {str(path)!r}: its safetensors header claims {length} bytes (the file "
            f"has {size}; edgepe reads at most {16 << 20})")
    big = _safetensors(tmp_path, b"{}" + b" " * ((16 << 20) - 1), name="big.safetensors")
    assert "claims 16777217 bytes" in _message(lambda: ck.safetensors_header(big))
    at = _safetensors(tmp_path, b"{}" + b" " * ((16 << 20) - 2), name="at.safetensors")
    assert ck.safetensors_header(at) == {}  # exactly 16 MiB of header is read


@pytest.mark.parametrize(("header", "why"), [
    (b"\xff{", "its safetensors header is not JSON"),
    (b"{nope", "its safetensors header is not JSON"),
    (b"[" * 100000 + b"]" * 100000, "its safetensors header is not JSON"),
    (b"[1]", "its safetensors header is not a JSON object"),
    ({"w": [1]}, "safetensors entry 'w' is not a tensor record (dtype, shape, data_offsets)"),
    ({"w": {"dtype": 1, "shape": [1]}}, "safetensors entry 'w' is not a tensor record"),
    ({"w": {"dtype": "F32", "shape": 1}}, "safetensors entry 'w' is not a tensor record"),
    ({"w": {"dtype": "F32", "shape": [-1]}}, "safetensors entry 'w' is not a tensor record"),
    ({"w": {"dtype": "F32", "shape": [True]}}, "safetensors entry 'w' is not a tensor record"),
    ({"w": {"dtype": "F32", "shape": [1.0]}}, "safetensors entry 'w' is not a tensor record"),
    ({"w": {"shape": [1]}}, "safetensors entry 'w' is not a tensor record"),
    ({"x" * 100: 1}, f"safetensors entry {'x' * 80!r} is not a tensor record"),
])
def test_a_safetensors_header_that_is_not_records_is_refused(tmp_path, header, why):
    path = _safetensors(tmp_path, header)
    assert _message(lambda: ck.safetensors_header(path)).startswith(
        f"checkpoint {str(path)!r}: {why}")


def test_safetensors_metadata_is_skipped_and_records_are_read(tmp_path):
    path = _safetensors(tmp_path, {"__metadata__": {"format": "pt"},
                                   "w": {"dtype": "F32", "shape": [2, 0], "data_offsets": [0, 0]}})
    assert ck.safetensors_header(path) == {"w": ("F32", (2, 0))}


def test_a_safetensors_tensor_of_another_dtype_or_bad_offsets_is_refused(tmp_path):
    path = _safetensors(tmp_path, {"w": {"dtype": "F8_E4M3", "shape": [1],
                                         "data_offsets": [0, 1]}}, b"\0")
    assert _message(lambda: ck.read_state_dict(path)) == (
        f"checkpoint {str(path)!r}: w is a F8_E4M3 tensor; edgepe takes F16, BF16, F32, F64, I8, "
        "U8, I16, I32, I64, BOOL")
    bad = _safetensors(tmp_path, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                       b"\0" * 4, name="bad.safetensors")
    assert _message(lambda: ck.read_state_dict(bad)).startswith(
        f"checkpoint {str(bad)!r} is not a readable safetensors file: ")


def test_is_safetensors_reads_the_ninth_byte(tmp_path):
    for data, want in ((b"\x02" + b"\0" * 7 + b"{}", True), (b"\x02" + b"\0" * 7 + b"[",
                                                             False),
                       (b"\0" * 8, False), (b"PK\x03\x04" + b"\0" * 10, False)):
        (tmp_path / "f").write_bytes(data)
        assert ck.is_safetensors(tmp_path / "f") is want, data


# ---- one named tensor ---------------------------------------------------------------------------


def test_candidates_lists_2d_tensors_position_names_first():
    shapes = {"b": (2, 3), "wpe.weight": (4, 3), "a": (1,), "pos_emb": (5, 3), "c": (1, 1)}
    assert ck.candidates(shapes) == "pos_emb [5, 3], wpe.weight [4, 3], b [2, 3], c [1, 1]"
    assert ck.candidates(shapes, limit=2) == "pos_emb [5, 3], wpe.weight [4, 3], ... (2 more)"
    assert ck.candidates({"a": (1,)}) == "none"
    many = {f"t{i:02d}": (1, 1) for i in range(13)}
    assert ck.candidates(many).endswith("t11 [1, 1], ... (1 more)")
    assert "more" not in ck.candidates({f"t{i:02d}": (1, 1) for i in range(12)})


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_read_tensor_and_a_missing_name(tmp_path, fmt):
    tensors = {"wpe.weight": torch.arange(6.0).reshape(3, 2), "h.w": torch.zeros(2, 2)}
    path = tmp_path / f"t.{fmt}"
    if fmt == "pt":
        torch.save(tensors, path)
    else:
        save_file(tensors, str(path))
    assert torch.equal(ck.read_tensor(path, "wpe.weight"), tensors["wpe.weight"])
    assert _message(lambda: ck.read_tensor(path, "nope")) == (
        f"checkpoint {str(path)!r} has no tensor 'nope'; its 2-D tensors: wpe.weight [3, 2], "
        "h.w [2, 2]")
    assert _message(lambda: ck.read_tensor(tmp_path / "x", "w")) == (
        f"checkpoint {str(tmp_path / 'x')!r} does not exist or is not a file")


def _learned(offset: int = 0, max_len: int = 4, d_model: int = 2):
    return build(resolve("learned", max_len, d_model=d_model, params={"offset": offset}))


def test_load_param_takes_the_rows_after_the_offset(tmp_path):
    table = torch.arange(20.0).reshape(10, 2)
    path = _save(tmp_path, {"wpe": table})
    module = _learned(offset=2)
    ck.load_param_into(module, path, "wpe")
    assert torch.equal(module.table, table[2:6])  # rows 2 .. 5: offset 2, max_len 4
    exact = _learned(offset=6)  # 6 + 4 rows: exactly the table
    ck.load_param_into(exact, path, "wpe")
    assert torch.equal(exact.table, table[6:10])
    short = _learned(offset=7)
    assert _message(lambda: ck.load_param_into(short, path, "wpe")) == (
        f"checkpoint {str(path)!r}: wpe is [10, 2], scheme 'learned' (max_len 4, d_model 2) "
        "takes table [4, 2]; it fits --max-len 3 --d-model 2 (after its 7 leading rows, "
        "--param offset=7)")
    assert _message(lambda: ck.load_param_into(_learned(d_model=3), path, "wpe")) == (
        f"checkpoint {str(path)!r}: wpe is [10, 2], scheme 'learned' (max_len 4, d_model 3) "
        "takes table [4, 3]; it fits --max-len 10 --d-model 2")
    assert _message(lambda: ck.load_param_into(_learned(offset=10), path, "wpe")).endswith(
        "takes table [4, 2] (after its 10 leading rows, --param offset=10)")  # no rows left


def test_load_param_refusals(tmp_path):
    path = _save(tmp_path, {"wpe": torch.zeros(4, 2), "v": torch.zeros(4), "bad": torch.full(
        (4, 2), float("nan"))})
    assert _message(lambda: ck.load_param_into(_learned(), path, "v")) == (
        f"checkpoint {str(path)!r}: v is [4], scheme 'learned' (max_len 4, d_model 2) takes "
        "table [4, 2]")
    assert _message(lambda: ck.load_param_into(_learned(), path, "bad")) == (
        f"checkpoint {str(path)!r}: bad holds NaN or Inf values")
    two = build(resolve("integer-learnable", 4, d_model=2))
    assert _message(lambda: ck.load_param_into(two, path, "wpe")) == (
        "--checkpoint-param loads one tensor; scheme 'integer-learnable' has 2 learned tensors "
        "(weight, bias): use --checkpoint (and --checkpoint-key)")
    none = build(resolve("sinusoidal", 4, d_model=2))
    assert _message(lambda: ck.load_param_into(none, path, "wpe")).startswith(
        "--checkpoint-param loads one tensor; scheme 'sinusoidal' has 0 learned tensors (none)")
    module = _learned()
    ck.load_param_into(module, _save(tmp_path, {"w": torch.ones(4, 2).double()}, "d.pt"), "w")
    assert module.table.dtype == torch.float32 and torch.equal(module.table, torch.ones(4, 2))


def test_more_hints_and_edges(tmp_path):
    # an empty checkpoint is "nothing"
    empty = _save(tmp_path, {}, "empty.pt")
    assert _message(lambda: ck.load_into(_binary(), empty)).endswith("; found nothing")
    # nine names are cut to eight too
    nine = _save(tmp_path, {f"l{i}": torch.zeros(1) for i in range(9)}, "nine.pt")
    assert _message(lambda: ck.load_into(_binary(), nine)).endswith(
        "found ... (1 more) [], " + ", ".join(f"l{i} [1]" for i in range(8)))
    # the prefixes that hold EVERY expected name: the intersection over names
    assert ck._prefixes({"v": 1, "w": 1}, {"a.w": 1, "b.w": 1, "b.v": 1}) == ["b"]
    # a key ending in other characters than '.' keeps them
    source = _binary()
    keyed = _save(tmp_path, {f"posX.{k}": v for k, v in source.state_dict().items()}, "k.pt")
    assert set(ck.read_state_dict(keyed, "posX")) == {"pe_binary", "projection.weight"}
    # prefixes listed: 12 of them, comma-separated
    many = _save(tmp_path, {f"p{i:02d}.w": torch.zeros(1) for i in range(13)}, "many.pt")
    assert _message(lambda: ck.read_state_dict(many, "q")).endswith(
        "its prefixes: " + ", ".join(f"p{i:02d}" for i in range(12)))
    # tensor_shapes of a torch checkpoint
    assert ck.tensor_shapes(keyed) == {"posX.pe_binary": (1, 16, 5),
                                       "posX.projection.weight": (8, 5)}


def test_a_safetensors_key_may_end_in_a_dot(tmp_path):
    source = _binary()
    path = tmp_path / "m.safetensors"
    save_file({f"pos.{k}": v.contiguous() for k, v in source.state_dict().items()}, str(path))
    for key in ("pos.", "pos"):
        assert set(ck.read_state_dict(path, key)) == {"pe_binary", "projection.weight"}
    x = tmp_path / "x.safetensors"
    save_file({f"posX.{k}": v.contiguous() for k, v in source.state_dict().items()}, str(x))
    assert set(ck.read_state_dict(x, "posX")) == {"pe_binary", "projection.weight"}


def test_a_learned_table_one_row_long_after_its_offset_still_names_the_fit(tmp_path):
    path = _save(tmp_path, {"wpe": torch.zeros(3, 2)})
    assert _message(lambda: ck.load_param_into(_learned(offset=2), path, "wpe")).endswith(
        "takes table [4, 2]; it fits --max-len 1 --d-model 2 (after its 2 leading rows, "
        "--param offset=2)")


def test_errors_without_a_message_are_named_by_their_type(tmp_path, monkeypatch):
    import pickle

    import safetensors

    path = _save(tmp_path, {"w": torch.zeros(1)})

    def unpickling(*args, **kwargs):
        raise pickle.UnpicklingError("  ")

    monkeypatch.setattr(torch, "load", unpickling)
    assert _message(lambda: ck.read_state_dict(path)) == (
        f"checkpoint {str(path)!r} was refused by the safe loader (weights_only=True): "
        "UnpicklingError")
    st = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(1)}, str(st))
    for error, text in ((OSError(""), "OSError"), (OSError("e" * 300 + "\nmore"), "e" * 200)):
        def failing(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(safetensors, "safe_open", failing)
        assert _message(lambda: ck.read_state_dict(st)) == (
            f"checkpoint {str(st)!r} is not a readable safetensors file: {text}")


def test_torch_load_is_asked_for_weights_only_on_the_cpu(tmp_path, monkeypatch):
    """The project's rule (torch >= 2.2 is allowed: weights_only became the default only in 2.6,
    so edgepe asks for it), and map_location cpu (a checkpoint saved on a GPU loads here)."""
    calls = []
    real = torch.load

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording)
    ck.read_state_dict(_save(tmp_path, {"w": torch.zeros(1)}))
    assert calls == [{"map_location": "cpu", "weights_only": True}]


# --- a zip checkpoint's unzipped size, before torch.load (issue 41) -----------------------------

def _zip(path, entries: dict[str, int], deflate: bool = True):
    import zipfile

    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method, compresslevel=1 if deflate else None) \
            as archive:
        for name, size in entries.items():
            with archive.open(name, "w", force_zip64=True) as f:
                block = bytes(min(size, 16 << 20))
                for start in range(0, size, len(block) or 1):
                    f.write(block[: size - start])
    return path


def test_a_zip_bomb_checkpoint_is_refused_before_torch_load(tmp_path):
    import subprocess
    import sys

    # 80 MiB of zeros deflated to ~80 KB (the attack: 2.3 MB to 2.6 GB, the same ratio)
    bomb = _zip(tmp_path / "bomb.pt", {"archive/data.pkl": 16, "archive/data/0": 80 << 20})
    size = bomb.stat().st_size
    code = ("import sys\n"
            "from edgepe.contract.checkpoint import read_state_dict\n"
            "from edgepe.contract.errors import CheckpointError\n"
            "import torch  # (read_state_dict's own import, before the base)\n"
            "def hwm():  # VmHWM (KiB): exec starts it afresh (ru_maxrss keeps the parent's)\n"
            "    return int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
            "base = hwm()\n"
            "try:\n    read_state_dict(sys.argv[1])\n"
            "except CheckpointError as exc:\n    print(exc)\n"
            "print(hwm() - base)\n")
    done = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True,
                          text=True, timeout=120)
    message, grown = done.stdout.strip().splitlines()
    assert message == (f"checkpoint {str(bomb)!r} is a {size}-byte archive that unzips to "
                       f"{(80 << 20) + 16} bytes, more than twice its size plus 67108864 "
                       "(torch stores its entries uncompressed): refused before loading it")
    assert int(grown) < 32 << 10  # KiB of peak RSS past the imports: nothing was inflated


def test_the_unzipped_bound_is_twice_the_file_plus_the_slack_summed_over_entries(
        tmp_path, monkeypatch):
    import torch

    from edgepe.contract import checkpoint

    assert checkpoint.UNZIPPED_SLACK == 64 << 20
    archive = _zip(tmp_path / "a.pt", {"a": 6000, "b": 4000})
    size = archive.stat().st_size
    monkeypatch.setattr(checkpoint, "UNZIPPED_SLACK", 10000 - 2 * size)
    checkpoint._check_archive(archive)  # exactly at the bound: read
    slack = 10000 - 2 * size - 1
    monkeypatch.setattr(checkpoint, "UNZIPPED_SLACK", slack)
    with pytest.raises(CheckpointError) as refused:
        checkpoint._check_archive(archive)  # both entries count: 6000 alone would pass
    # the whole line, in process (the bomb test reads it from a child, out of mutmut's reach)
    assert str(refused.value) == (
        f"checkpoint {str(archive)!r} is a {size}-byte archive that unzips to 10000 bytes, "
        f"more than twice its size plus {slack} (torch stores its entries uncompressed): "
        "refused before loading it")
    # torch's own checkpoints (entries stored) and its legacy format pass
    monkeypatch.setattr(checkpoint, "UNZIPPED_SLACK", 0)
    saved = tmp_path / "w.pt"
    torch.save({"w": torch.ones(64, 64)}, saved)
    checkpoint._check_archive(saved)
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(64, 64)}, legacy, _use_new_zipfile_serialization=False)
    checkpoint._check_archive(legacy)
    # a zip whose central directory is cut: unreadable, one line
    broken = tmp_path / "broken.pt"
    data = saved.read_bytes()
    broken.write_bytes(data[:-30] + bytes(30))
    with pytest.raises(CheckpointError) as unreadable:
        checkpoint.read_state_dict(broken)
    assert str(unreadable.value) == (
        f"checkpoint {str(broken)!r} is not a readable torch checkpoint (OSError)")
    # its end record intact (a zip by zipfile.is_zipfile) but its central directory's entries
    # unsigned: refused by the archive check itself, before torch reads anything
    central = data.index(b"PK\x01\x02")
    unsigned = tmp_path / "unsigned.pt"
    unsigned.write_bytes(data[:central] + b"XX" + data[central + 2:])
    with pytest.raises(CheckpointError) as refused:
        checkpoint._check_archive(unsigned)
    assert str(refused.value) == (
        f"checkpoint {str(unsigned)!r} is not a readable torch checkpoint (BadZipFile)")
