"""Build the README's Hugging Face example: a tiny random-weight transformers model exported as
a user would, ``torch.onnx.export(..., dynamo=True)`` (``model.onnx`` and ``model.onnx.data``).

    python scripts/hf_example.py llama hf-llama     # then: edgepe graft hf-llama/model.onnx ...

FAMILY is one of tests/_hf_models.py's (llama, mistral, qwen2, phi, gpt_neox, gptj, gpt2, opt,
bloom, llama-linear, llama-llama3, llama-yarn, llama-dynamic); the model is built from its
config object in code (no download), seeded, with inputs input_ids, attention_mask,
position_ids (where the model takes them) and past_key.i/past_value.i, outputs logits and
present_key.i/present_value.i, batch, sequence and past lengths dynamic.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import _hf_models  # noqa: E402 - tests/ holds the builders the tests use too


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    family, folder = argv
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        path = _hf_models.export(family, Path(folder))
    print(f"wrote {path} and {path.name}.data ({_hf_models.config(family).model_type}, "
          "random weights, seed 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
