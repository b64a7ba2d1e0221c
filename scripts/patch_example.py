"""Build the README's ``edgepe patch`` example: a tiny random-weight Llama-style model, saved as
``save_pretrained`` writes it (``config.json`` and ``model.safetensors``).

    python scripts/patch_example.py FOLDER [FAMILY]     # then: edgepe patch FOLDER ...

FAMILY (default llama) is one of tests/_hf_models.py's or tests/test_patch.py's extra ones
(gemma3, qwen3); the model is built from its config object in code (no download), seeded.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _hf_models  # noqa: E402 - tests/ holds the builders the tests use too


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    folder, family = Path(argv[0]), argv[1] if len(argv) == 2 else "llama"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        model = _hf_models.model(family)
        model.save_pretrained(folder)
    print(f"wrote {folder}/config.json and {folder}/model.safetensors "
          f"({model.config.model_type}, random weights, seed 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
