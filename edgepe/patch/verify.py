"""Verify a patched-and-exported program: rebuild it from the user's model, then trust it.

A patched program is the user's model, so its proof is parity with the unpatched model on the
same runtime; ``export`` measured that and recorded it in the manifest beside the program. A
number in that file is a claim, not a proof (DESIGN: verification never takes a number from the
file under test), and running the program would run what the file says. So ``verify_program``
treats it as edgepe treats every artifact it did not just write (docs/readme/verify.md): a
reproducible build.

1. The manifest is read bounded (``contract.manifest.read_bytes``, 1 MiB, a JSON object) and
   its fields checked (kind, exporter, mode, max_len, sha256); the program is a regular file
   whose sha256 is the manifest's.
2. ``FOLDER``, the model it was built from, must be the one recorded (``source``: the sha256 of
   its config.json and of each ``*.safetensors``); edgepe opens no path the manifest names.
3. The program is built again from ``FOLDER`` with the recorded mode, max_len and exporter
   (``patch`` then ``export``, which proves the rebuilt program against the unpatched model on
   the runtime again: parity re-measured, not read) and must be byte-identical to the file
   (exports are deterministic: torch.onnx, ExecuTorch and litert-torch write the same bytes for
   the same model here). Only then is the file the program that was proven.

Nothing from the file runs: its bytes are hashed and compared, never loaded in a runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from edgepe.contract.errors import ArtifactError, ParityError
from edgepe.contract.manifest import MAX_BYTES, open_regular, path_for, read_bytes
from edgepe.patch.build import MODES
from edgepe.patch.export import EXPORTERS, SUFFIX

KIND = "patched-model"
PROGRAM_LIMIT = 1 << 34  # 16 GiB: the largest program hashed (streamed, never held)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_source(folder: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` of a model folder's config.json and ``*.safetensors``."""
    folder = Path(folder)
    files = [folder / "config.json", *sorted(folder.glob("*.safetensors"))]
    return {f.name: file_sha256(f) for f in files if f.is_file()}


def read_manifest(program: Path) -> dict:
    """The checked manifest of a patched program (module docstring, step 1)."""
    where = str(path_for(program))
    try:
        manifest = json.loads(read_bytes(path_for(program), "manifest", MAX_BYTES))
    except (ValueError, UnicodeDecodeError):
        raise ArtifactError(f"{where!r} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise ArtifactError(f"{where!r} is not the manifest of a patched model (kind "
                            f"{KIND!r}; edgepe patch FOLDER --out writes one)")
    checks = {
        "exporter": lambda v: v in EXPORTERS and program.suffix == SUFFIX[v],
        "mode": lambda v: v in MODES,
        "max_len": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2**31,
        "sha256": lambda v: isinstance(v, str) and len(v) == 64
        and all(c in "0123456789abcdef" for c in v),
        "source": lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and isinstance(s, str) for k, s in v.items()),
    }
    for name, ok in checks.items():
        if not ok(manifest.get(name)):
            raise ArtifactError(f"{where!r}: field {name!r} is missing or invalid "
                                f"({str(manifest.get(name))[:60]!r})")
    return manifest


def verify_program(folder: str | Path, program: str | Path) -> dict:
    """Rebuild ``program`` from ``folder`` and require it byte-identical (module docstring).
    Returns the rebuilt manifest (its ``parity`` measured now); raises ``ArtifactError`` for a
    file that is not such a program or a folder that is not its model, ``ParityError`` when the
    rebuild differs or its proof fails."""
    from edgepe.patch import patch
    from edgepe.patch.export import export
    from edgepe.patch.load import load_folder

    program = Path(program)
    manifest = read_manifest(program)
    fd = open_regular(program, "program", PROGRAM_LIMIT)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != manifest["sha256"]:
        raise ArtifactError(f"{str(program)!r} does not match its manifest's sha256: changed "
                            "since it was written")
    if folder_source(folder) != manifest["source"]:
        raise ArtifactError(f"{str(folder)!r} is not the model {str(program)!r} was built from "
                            "(its config.json/*.safetensors hashes differ from the manifest's)")
    model = load_folder(folder)
    report = patch(model, mode=manifest["mode"], max_len=manifest["max_len"])
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = Path(tmp) / program.name
        again = export(report, rebuilt, manifest["exporter"], source=manifest["source"])
    if again["sha256"] != manifest["sha256"]:
        raise ParityError(f"{str(program)!r} is not what edgepe builds from {str(folder)!r} "
                          f"with its recorded options (sha256 {again['sha256'][:12]}, the file "
                          f"{manifest['sha256'][:12]})")
    return again
