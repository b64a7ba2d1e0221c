"""Loading weights into a reference module, safely.

Checkpoints are read with ``torch.load(weights_only=True)``: a pickle that would run code is
refused by torch's restricted unpickler, never executed. The state_dict must hold exactly the
module's keys with the module's shapes (the message lists expected vs found), and finite values;
each tensor a plain dense CPU tensor of a real dtype (not float8, complex, quantized, sparse or
meta, which the reference modules cannot take without silent loss or a crash).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from edgepe.contract.errors import CheckpointError


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_state_dict(path: str | Path, key: str | None = None) -> dict:
    """The state_dict in ``path`` (a bare one, or under a ``state_dict`` key); with ``key``, the
    entries under ``key.`` with that prefix removed (a whole model's state_dict:
    ``--checkpoint-key pos`` takes ``pos.projection.weight`` as ``projection.weight``)."""
    import pickle
    import warnings

    import torch

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist or is not a file")
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
