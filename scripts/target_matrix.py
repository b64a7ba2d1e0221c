"""Print the scheme x target matrix of docs/readme/targets.md: what ``export --target`` writes.

    .venv/bin/python scripts/target_matrix.py [--max-len 64]

Each cell: the compute graph's lowering the target gets (``bitwise``, ``arith``, ``arith32``,
``float``, ``trunc``; ``yes`` for schemes without lowerings) or ``-`` when it refuses, then ``T``
when the table graph runs on it, then ``S:lowering`` when the ``--mode sliced`` graph does (with
the slicing it gets). Never imported by the package.
"""

from __future__ import annotations

import argparse


def matrix(max_len: int) -> str:
    from edgepe import api
    from edgepe.contract.errors import BadParameterError
    from edgepe.graphs import COMPUTE
    from edgepe.schemes import resolve, scheme_ids
    from edgepe.targets import PROFILES, for_export

    lines = ["| scheme | " + " | ".join(PROFILES) + " |", "|---|" + "---|" * len(PROFILES)]
    for scheme in scheme_ids():
        cells = []
        for target in PROFILES:
            parts = []
            for mode in resolve(scheme, max_len).spec.modes:
                try:
                    chosen, _ = for_export(api.make_config(scheme, max_len, mode=mode), target,
                                           lowering_given=False)
                except BadParameterError:
                    parts.append("-" if mode == "compute" else "")
                    continue
                bits = COMPUTE.get(scheme, ("",))[0] == "bits"
                if mode == "sliced":  # S, with the slicing lowering (bitwise, trunc, clip32)
                    parts.append(f"S:{chosen.lowering}")
                    continue
                parts.append("T" if mode == "table" else chosen.lowering if bits else "yes")
            cells.append(" ".join(p for p in parts if p) or "-")
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=64)
    print(matrix(parser.parse_args(argv).max_len))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
