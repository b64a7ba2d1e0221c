"""Build ``tests/data/optimum_t5/``: a tiny random-weight T5 exported by Hugging Face Optimum as
a user deploying seq2seq does (``optimum-cli export onnx --task text2text-generation-with-past``),
of which the decoder with its KV cache is kept (issue 40).

The model: ``T5ForConditionalGeneration`` from ``tests/_t5_models.T5_CONFIG`` (16 buckets,
max_distance 32, 2 layers of width 32 and 4 heads, vocabulary 64; seeded with
``torch.manual_seed(0)``; no download), saved with ``save_pretrained`` and exported from there
with ``optimum.exporters.onnx.main_export(folder, out, task="text2text-generation-with-past")``.
Optimum writes ``encoder_model.onnx``, ``decoder_model.onnx``, ``decoder_with_past_model.onnx``
and ``decoder_model_merged.onnx`` (the two decoders in one ``If`` on ``use_cache_branch``);
``decoder_with_past_model.onnx`` (inputs ``encoder_attention_mask``, ``input_ids``,
``past_key_values.i.decoder/encoder.key/value``; no position input) and the ``config.json``
beside it are kept. Run as ``scripts/optimum_fixtures.py`` says (Optimum needs transformers
< 4.58, a venv of its own)::

    /work/optvenv/bin/python scripts/optimum_t5_fixture.py

``tests/test_graft_t5.py`` grafts the file with onnx and onnxruntime alone.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "data" / "optimum_t5"
TASK = "text2text-generation-with-past"
KEPT = ("decoder_with_past_model.onnx", "config.json")


def main() -> int:
    from importlib.metadata import version

    import torch
    import transformers as tf
    from optimum.exporters.onnx import main_export

    sys.path.insert(0, str(HERE.parent / "tests"))
    from _t5_models import T5_CONFIG

    torch.manual_seed(0)
    lm = tf.T5ForConditionalGeneration(tf.T5Config(**T5_CONFIG)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        saved, exported = Path(tmp) / "hf", Path(tmp) / "onnx"
        lm.save_pretrained(saved)
        main_export(str(saved), exported, task=TASK, library_name="transformers")
        OUT.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            shutil.copyfile(exported / name, OUT / name)
    names = ("optimum-onnx", "optimum", "transformers", "torch", "onnx", "onnxruntime")
    (OUT / "VERSIONS.txt").write_text(
        "# tests/data/optimum_t5/: made by scripts/optimum_t5_fixture.py, with:\n"
        + "\n".join(f"{n}=={version(n)}" for n in names)
        + f"\n# optimum-cli export onnx --model DIR --task {TASK} OUT; kept: {', '.join(KEPT)}\n")
    for name in KEPT:
        print(f"{OUT / name} ({(OUT / name).stat().st_size:,} B)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
