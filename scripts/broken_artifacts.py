"""The damaged artifacts docs/readme/verify.md shows ``edgepe verify`` refusing, made from a
good export of the demo graph (run it in the folder that holds ``models/``)::

    edgepe export --scheme binary --max-len 512
    python scripts/broken_artifacts.py models/binary-compute-L512-d64.onnx

writes into the current folder:

- ``tampered.onnx``: bit 3's weight for column 5 raised by 0.25 (the graph stores it scaled by
  2^-3, so by 0.25 / 8), the manifest re-signed (its sha256 is the new file's);
- ``stale.onnx``: the graph as exported, its manifest's sha256 all zeros;
- ``cut.onnx``: the first 1000 bytes of the graph, with its manifest;
- ``notes.onnx``: a text file, with the graph's manifest copied beside it;
- ``lonely.onnx``: the graph without its manifest, and without the copy in its metadata_props
  (a graph moved alone that keeps that copy is accepted: verify.md says how).

``scripts/`` is never imported by the package.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    source = Path(argv[0])
    data = source.read_bytes()
    manifest = json.loads(Path(str(source) + ".json").read_text())

    def write(name: str, payload: bytes, sidecar: dict | None) -> None:
        Path(name).write_bytes(payload)
        if sidecar is not None:
            Path(name + ".json").write_text(json.dumps(sidecar, indent=1, sort_keys=True) + "\n")

    model = onnx.load_model_from_string(data)
    weights = next(t for t in model.graph.initializer if t.name == "projection_scaled")
    values = numpy_helper.to_array(weights).copy()
    values[3, 5] += np.float32(0.25 / 8)
    weights.CopyFrom(numpy_helper.from_array(values, weights.name))
    tampered = model.SerializeToString()
    write("tampered.onnx", tampered,
          {**manifest, "sha256": hashlib.sha256(tampered).hexdigest()})
    write("stale.onnx", data, {**manifest, "sha256": "0" * 64})
    write("cut.onnx", data[:1000], manifest)
    write("notes.onnx", json.dumps(manifest, indent=1).encode(), manifest)
    lonely = onnx.load_model_from_string(data)
    del lonely.metadata_props[:]
    write("lonely.onnx", lonely.SerializeToString(), None)
    print("wrote tampered.onnx, stale.onnx, cut.onnx, notes.onnx, lonely.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
