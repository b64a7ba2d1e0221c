"""Build ``tests/data/optimum/<family>/model.onnx``: tiny random-weight transformers models
exported by Hugging Face Optimum's own ONNX exporter, as a user would (issue 29).

Each family's model is built from a config object in code (no download; seeded with
``torch.manual_seed(0)``; the sizes of ``tests/_hf_models.py``: 2 layers, width 32, 4 heads,
vocabulary 64), saved with ``save_pretrained`` into a temporary folder, and exported from there
with ``optimum.exporters.onnx.main_export(folder, out, task="text-generation-with-past")`` (what
``optimum-cli export onnx --model FOLDER --task text-generation-with-past OUT`` runs). Only the
``model.onnx`` it writes (a few hundred KB at most; one self-contained file) and the
``config.json`` it writes beside it (what ``edgepe graft --from-hf-config`` reads) are kept. The
versions used and the command go into ``tests/data/optimum/VERSIONS.txt``.

Optimum cannot live in the project's venv (optimum-onnx 0.1.0 needs transformers < 4.58; the
project pins 5.x), so this script runs in a venv of its own, outside the repository::

    python3 -m venv /work/optvenv
    /work/optvenv/bin/pip install -U pip
    /work/optvenv/bin/pip install torch==2.13.0 "optimum-onnx==0.1.0" \\
        "transformers>=4.57,<4.58" onnx onnxruntime
    /work/optvenv/bin/python scripts/optimum_fixtures.py [FAMILY ...]

The tests that read the fixtures (``tests/test_graft_optimum.py``) need only onnx and
onnxruntime. A family Optimum refuses is reported and skipped (no file written for it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

SEED = 0
VOCAB = 64
TASK = "text-generation-with-past"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "optimum"
FAMILIES = ("llama", "llama-linear", "llama-llama3", "llama-yarn", "mistral", "qwen2", "phi",
            "gpt_neox", "gptj", "bloom", "mpt", "gpt2", "opt")
# Llama's rope_scaling variants (transformers 4.x's argument; 5.x calls it rope_parameters)
SCALED = {
    "llama-linear": {"rope_type": "linear", "factor": 2.0},
    "llama-llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "llama-yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    # not among FAMILIES: dynamic NTK's inv_freq depends on the running length, which the
    # TorchScript trace freezes (see tests/test_graft_optimum.py)
    "llama-dynamic": {"rope_type": "dynamic", "factor": 2.0},
}


def config(family: str):
    """The transformers (4.57) config object of ``family``: ``tests/_hf_models.config``'s
    sizes, in the argument names of transformers 4.x."""
    import transformers as tf

    llama = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 256}
    if family == "llama":
        return tf.LlamaConfig(**llama)
    if family in SCALED:
        return tf.LlamaConfig(**llama, rope_scaling=SCALED[family])
    if family == "mistral":
        return tf.MistralConfig(**llama)
    if family == "qwen2":
        return tf.Qwen2Config(**llama)
    if family == "phi":
        return tf.PhiConfig(**{k: v for k, v in llama.items() if k != "num_key_value_heads"},
                            partial_rotary_factor=0.5)
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4,
                                max_position_embeddings=256, rotary_pct=0.25)
    if family == "gptj":
        return tf.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=256,
                             rotary_dim=4)
    if family == "gpt2":
        return tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=256)
    if family == "opt":
        return tf.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=256,
                            word_embed_proj_dim=32)
    if family == "bloom":
        return tf.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)
    if family == "mpt":
        return tf.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=256,
                            expansion_ratio=2)
    raise KeyError(family)


def export(family: str, out: Path) -> Path:
    """``out/model.onnx``: ``family``'s seeded tiny model through Optimum's ``main_export``."""
    import torch
    import transformers as tf
    from optimum.exporters.onnx import main_export

    torch.manual_seed(SEED)
    lm = tf.AutoModelForCausalLM.from_config(config(family)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        saved, exported = Path(tmp) / "hf", Path(tmp) / "onnx"
        lm.save_pretrained(saved)
        main_export(str(saved), exported, task=TASK, library_name="transformers")
        out.mkdir(parents=True, exist_ok=True)
        if (exported / "model.onnx_data").exists() or (exported / "model.onnx.data").exists():
            raise RuntimeError(f"{family}: Optimum wrote external data; keep fixtures one file")
        shutil.copyfile(exported / "model.onnx", out / "model.onnx")
        shutil.copyfile(exported / "config.json", out / "config.json")  # for --from-hf-config
    return out / "model.onnx"


def versions() -> str:
    from importlib.metadata import version

    names = ("optimum-onnx", "optimum", "transformers", "torch", "onnx", "onnxruntime")
    return "\n".join(f"{n}=={version(n)}" for n in names)


def main(argv: list[str]) -> int:
    families = argv or list(FAMILIES)
    refused = {}
    for family in families:
        try:
            path = export(family, OUT / family)
        except Exception as exc:  # noqa: BLE001 - report what Optimum says and go on
            refused[family] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            print(f"{family}: REFUSED {refused[family]}", file=sys.stderr)
            continue
        print(f"{family}: {path} ({path.stat().st_size:,} B)")
    lines = [
        "# tests/data/optimum/*/model.onnx: made by scripts/optimum_fixtures.py (its docstring",
        "# says how to run it again), in a venv of its own with:",
        versions(),
        "# each family: torch.manual_seed(0); AutoModelForCausalLM.from_config(config); "
        "save_pretrained(DIR); then",
        f"# optimum.exporters.onnx.main_export(DIR, OUT, task={TASK!r}) ==",
        f"# optimum-cli export onnx --model DIR --task {TASK} OUT",
        "# families: " + ", ".join(sorted(p.parent.name for p in OUT.glob("*/model.onnx"))),
    ]
    lines += [f"# refused by Optimum: {f}: {why}" for f, why in refused.items()]
    (OUT / "VERSIONS.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
