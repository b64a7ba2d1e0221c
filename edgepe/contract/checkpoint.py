"""Loading weights into a reference module, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: a pickle that would run code is
refused by torch's restricted unpickler, never executed. The state_dict must hold exactly the
module's keys with the module's shapes (the message lists expected vs found), and finite values;
each tensor a plain dense CPU tensor of a real dtype (not float8, complex, quantized, sparse or
meta, which the reference modules cannot take without silent loss or a crash).

safetensors files (what ``save_pretrained`` writes) are read too, told apart by their first bytes,
not their name: the header is bounded (``SAFETENSORS_HEADER_LIMIT``, and within the file), parsed
as JSON here to list tensors without reading them, and only the tensors asked for are read (by
the ``safetensors`` package, which never runs code). ``--checkpoint-param NAME`` loads one named
tensor of a whole model's checkpoint (``transformer.wpe.weight``) into a scheme with one learned
tensor; a missing name lists the file's 2-D tensors.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from edgepe.contract.errors import CheckpointError

# safetensors' own reader refuses headers over 100 MB; a real one (a 70B model's index of
# tensors) is well under 1 MiB per file, so 16 MiB bounds what a hostile file makes us parse.
SAFETENSORS_HEADER_LIMIT = 16 << 20
_SAFETENSORS_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
                       "I8": "int8", "U8": "uint8", "I16": "int16", "I32": "int32",
                       "I64": "int64", "BOOL": "bool"}


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_state_dict(path: str | Path, key: str | None = None) -> dict:
    """The state_dict in ``path`` (a bare one, or under a ``state_dict`` key); with ``key``, the
    entries under ``key.`` with that prefix removed (a whole model's state_dict:
    ``--checkpoint-key pos`` takes ``pos.projection.weight`` as ``projection.weight``); a
    torch checkpoint or a safetensors file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if is_safetensors(path):
        header = safetensors_header(path)
        prefix = None if key is None else key.rstrip(".") + "."
        names = [n for n in header if prefix is None or n.startswith(prefix)]
        loaded = _safetensors_tensors(path, names)
    else:
        loaded = _torch_load(path)
    return _checked_state(path, loaded, key)


# A torch checkpoint is a zip archive whose entries torch stores uncompressed, so what it holds
# is about its own size; a deflated archive (a zip bomb: 2.3 MB inflating to 2.6 GB inside
# torch.load, issue 41) may hold at most twice its size plus this before torch.load reads it.
UNZIPPED_SLACK = 64 << 20


def _check_archive(path: Path) -> None:
    """Refuse (``CheckpointError``) a zip checkpoint whose entries' declared uncompressed sizes
    (``zipfile``'s central directory: what torch's reader inflates, and checks, entry by entry)
    sum past ``2 x`` its size ``+ UNZIPPED_SLACK``, before ``torch.load`` inflates any."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return  # torch's legacy format: its storages are the file's own bytes
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            unzipped = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} is not a readable torch checkpoint "
                              f"({type(exc).__name__})") from None
    if unzipped > 2 * size + UNZIPPED_SLACK:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is a {size}-byte archive that unzips to {unzipped} "
            f"bytes, more than twice its size plus {UNZIPPED_SLACK} (torch stores its entries "
            "uncompressed): refused before loading it")


def _torch_load(path: Path):
    import pickle
    import warnings

    import torch

    _check_archive(path)
    try:
        with warnings.catch_warnings():  # torch's deprecation notes are not the user's problem
            warnings.simplefilter("ignore")
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {str(path)!r} was refused by the safe loader (weights_only=True): {first}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise CheckpointError(
            f"checkpoint {str(path)!r} is not a readable torch checkpoint "
            f"({type(exc).__name__})"
        ) from None
    return loaded


def _checked_state(path: Path, loaded, key: str | None) -> dict:
    import torch

    if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
        loaded = loaded["state_dict"]
    if not isinstance(loaded, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items()
    ):
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not hold a state_dict (a mapping of names to tensors)"
        )
    allowed = _real_dtypes(torch)
    for name, value in loaded.items():
        kind = _unusable(value, allowed)
        if kind:
            raise CheckpointError(
                f"checkpoint {str(path)!r}: {name} is a {kind} tensor; edgepe takes dense CPU "
                f"tensors of {', '.join(sorted(str(d).removeprefix('torch.') for d in allowed))}"
            )
    if key is not None:
        prefix = key.rstrip(".") + "."
        picked = {k[len(prefix):]: v for k, v in loaded.items() if k.startswith(prefix)}
        if not picked:
            heads = sorted({k.split(".")[0] for k in loaded if "." in k})
            raise CheckpointError(
                f"checkpoint {str(path)!r} has no entries under --checkpoint-key {key!r}; "
                f"its prefixes: {', '.join(heads[:12]) or 'none (a bare state_dict)'}"
            )
        loaded = picked
    return loaded


def _prefixes(expected, found) -> list[str]:
    """The prefixes under which ``found`` holds every ``expected`` name (``pos`` for
    ``pos.projection.weight``), for the error that suggests ``--checkpoint-key``."""
    candidates = None
    for name in expected:
        here = {f[: -len(name) - 1] for f in found if f.endswith("." + name)}
        candidates = here if candidates is None else candidates & here
    return sorted(candidates or ())


def _implied_d_model(expected: dict, found: dict, d_model) -> int | None:
    """The d_model the checkpoint's shapes imply, when they differ from the module's in the
    d_model axes only and agree on one value there."""
    implied = set()
    for name, want in expected.items():
        got = found.get(name)
        if got is None or len(got) != len(want):
            return None
        for w, g in zip(want, got, strict=True):
            if w != g:
                implied.add(g if w == d_model else None)
    return implied.pop() if len(implied) == 1 and None not in implied else None


def _real_dtypes(torch) -> set:
    return {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool,
            torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def _unusable(value, allowed: set) -> str | None:
    """What makes ``value`` unusable as a weight ('meta', 'sparse', ...), or ``None``."""
    import torch

    if value.is_meta:
        return "meta (no data)"
    if value.layout != torch.strided:
        return f"{str(value.layout).removeprefix('torch.')} (not dense)"
    if value.is_quantized:
        return f"quantized {str(value.dtype).removeprefix('torch.')}"
    if value.dtype not in allowed:
        return str(value.dtype).removeprefix("torch.")
    return None


def load_into(module, path: str | Path, key: str | None = None) -> None:
    """Load ``path`` (its entries under ``key``, if given) into ``module`` after checking keys,
    shapes and finiteness. A mismatch names what would fit: the ``--checkpoint-key`` prefixes
    that hold the module's names, or the ``--d-model`` the shapes imply."""
    import torch

    state = read_state_dict(path, key)
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    scheme = module.config.scheme
    if expected != found:
        def fmt(d: dict) -> str:
            return ", ".join(f"{k} {list(s)}" for k, s in sorted(d.items())) or "nothing"

        hint = ""
        if prefixes := _prefixes(expected, found):
            hint = ("; it holds them under a prefix: pass --checkpoint-key "
                    + " or ".join(repr(p) for p in prefixes))
        elif (d := _implied_d_model(expected, found, module.config.d_model)) is not None:
            hint = f"; its shapes imply --d-model {d}"
        if len(found) > 8:  # a whole model: its names would drown the message
            found = dict(sorted(found.items())[:8]) | {f"... ({len(state) - 8} more)": ()}
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not fit scheme '{scheme}' "
            f"(max_len {module.config.max_len}, d_model {module.config.d_model}): "
            f"expected {fmt(expected)}; found {fmt(found)}{hint}"
        )
    for key, value in state.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise CheckpointError(f"checkpoint {str(path)!r}: {key} holds NaN or Inf values")
    reference = module.state_dict()
    for key, value in reference.items():
        # Buffers derived from the configuration (the demo's pe_binary table) must match it.
        if key not in dict(module.named_parameters()) and not torch.equal(
            state[key].to(value.dtype), value
        ):
            raise CheckpointError(
                f"checkpoint {str(path)!r}: buffer {key} differs from what scheme '{scheme}' "
                "computes for this configuration"
            )
    module.load_state_dict({k: v.to(reference[k].dtype) for k, v in state.items()})


def is_safetensors(path: str | Path) -> bool:
    """Whether ``path`` starts as a safetensors file does: a little-endian u64 header length,
    then the header's ``{``. A torch checkpoint starts with a zip's ``PK`` or a pickle opcode."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def safetensors_header(path: str | Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` from a safetensors header, read without the tensors: the
    header length is bounded (``SAFETENSORS_HEADER_LIMIT``) and must lie within the file, and
    every entry must be a tensor record (``dtype``, ``shape``, ``data_offsets``)."""
    import json

    path = Path(path)
    where = f"checkpoint {str(path)!r}"
    size = path.stat().st_size
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length > SAFETENSORS_HEADER_LIMIT or length + 8 > size:
            raise CheckpointError(
                f"{where}: its safetensors header claims {length} bytes (the file has {size}; "
                f"edgepe reads at most {SAFETENSORS_HEADER_LIMIT})")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(f"{where}: its safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: its safetensors header is not a JSON object")
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(entry, dict) and isinstance(entry.get("dtype"), str)
              and isinstance(entry.get("shape"), list)
              and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                      for n in entry["shape"]))
        if not ok:
            raise CheckpointError(f"{where}: safetensors entry {str(name)[:80]!r} is not a "
                                  "tensor record (dtype, shape, data_offsets)")
        tensors[name] = (entry["dtype"], tuple(entry["shape"]))
    return tensors


def _safetensors_tensors(path: Path, names) -> dict:
    """The named tensors of a safetensors file (its reader checks offsets against the file)."""
    from safetensors import SafetensorError, safe_open

    header = safetensors_header(path)
    for name in names:
        if header[name][0] not in _SAFETENSORS_DTYPES:
            raise CheckpointError(
                f"checkpoint {str(path)!r}: {name} is a {header[name][0]} tensor; edgepe takes "
                f"{', '.join(_SAFETENSORS_DTYPES)}")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {name: f.get_tensor(name) for name in names}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} is not a readable safetensors file: "
                              f"{first[:200]}") from None


def tensor_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of every tensor in a checkpoint (safetensors: from the header only)."""
    path = Path(path)
    if is_safetensors(path):
        return {k: shape for k, (_, shape) in safetensors_header(path).items()}
    return {k: tuple(v.shape) for k, v in read_state_dict(path).items()}


def candidates(shapes: dict[str, tuple[int, ...]], limit: int = 12) -> str:
    """The 2-D tensors of a checkpoint as ``name [rows, cols]``, position-like names first."""
    two_d = [(k, s) for k, s in shapes.items() if len(s) == 2]
    two_d.sort(key=lambda item: (not any(w in item[0].lower() for w in ("pos", "wpe")),
                                 item[0]))
    shown = ", ".join(f"{k} {list(s)}" for k, s in two_d[:limit])
    more = f", ... ({len(two_d) - limit} more)" if len(two_d) > limit else ""
    return (shown + more) or "none"


def read_tensor(path: str | Path, name: str):
    """One named tensor of a checkpoint; a missing name lists the file's 2-D tensors."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
    if is_safetensors(path):
        shapes = tensor_shapes(path)
        if name not in shapes:
            raise CheckpointError(f"checkpoint {str(path)!r} has no tensor {name!r}; its 2-D "
                                  f"tensors: {candidates(shapes)}")
        return _checked_state(path, _safetensors_tensors(path, [name]), None)[name]
    state = read_state_dict(path)
    if name not in state:
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        raise CheckpointError(f"checkpoint {str(path)!r} has no tensor {name!r}; its 2-D "
                              f"tensors: {candidates(shapes)}")
    return state[name]


def load_param_into(module, path: str | Path, name: str) -> None:
    """Load the tensor ``name`` of ``path`` into ``module``'s one learned tensor. A learned table
    takes ``offset`` leading rows off (OPT's 2) and then its first ``max_len`` rows, so a table
    exported shorter than the model's context is fine; any other mismatch names the shape."""
    import torch

    params = dict(module.named_parameters())
    scheme = module.config.scheme
    if len(params) != 1:
        raise CheckpointError(
            f"--checkpoint-param loads one tensor; scheme '{scheme}' has {len(params)} learned "
            f"tensors ({', '.join(params) or 'none'}): use --checkpoint (and --checkpoint-key)")
    (target, reference), = params.items()
    tensor = read_tensor(path, name)
    want = tuple(reference.shape)
    got = tuple(tensor.shape)
    offset = module.config.params.get("offset", 0) if scheme == "learned" else 0
    if scheme == "learned" and len(got) == 2 and got[1] == want[1] and got[0] >= offset + want[0]:
        tensor = tensor[offset: offset + want[0]]
    elif got != want:
        hint = ""
        if scheme == "learned" and len(got) == 2:
            rows = got[0] - offset
            hint = (f"; it fits --max-len {rows} --d-model {got[1]}" if rows >= 1 else "")
            if offset:
                hint += f" (after its {offset} leading rows, --param offset={offset})"
        raise CheckpointError(
            f"checkpoint {str(path)!r}: {name} is {list(got)}, scheme '{scheme}' "
            f"(max_len {module.config.max_len}, d_model {module.config.d_model}) takes "
            f"{target} {list(want)}{hint}")
    if tensor.is_floating_point() and not torch.isfinite(tensor).all():
        raise CheckpointError(f"checkpoint {str(path)!r}: {name} holds NaN or Inf values")
    with torch.no_grad():
        reference.copy_(tensor.to(reference.dtype))
