"""Generate text with Optimum's own runtime from each grafted Optimum fixture (issue 29).

For each ``tests/data/optimum/<family>/``: ``edgepe graft model.onnx --out`` (run by the
``edgepe`` given with ``--edgepe``, from the project's venv, no PE given, RoPE and Bloom tables of
256 positions), then ``optimum.onnxruntime.ORTModelForCausalLM`` loads the original and the
grafted model (``config.json`` beside each, KV cache on) and generates ``--tokens`` new tokens
greedily for a batch of 2 prompts of 6 tokens, the second left-padded by 2; transformers' own
torch model of the same seeded config generates too. Prints one line per family: whether the
grafted model's tokens equal the original's and torch's.

It runs in the venv that made the fixtures (``scripts/optimum_fixtures.py`` says how)::

    /work/optvenv/bin/python scripts/optimum_generate.py --edgepe /work/main/.venv/bin/edgepe
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimum_fixtures as fixtures  # noqa: E402 - beside this script

ROWS_256 = ("gpt2", "opt", "gptj", "mpt")  # these keep their own table's rows


def generate(folder: Path, ids, mask, tokens: int):
    from optimum.onnxruntime import ORTModelForCausalLM

    model = ORTModelForCausalLM.from_pretrained(folder, use_cache=True, use_io_binding=False)
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens,
                          min_new_tokens=tokens, do_sample=False, pad_token_id=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edgepe", required=True, help="the edgepe command of the project")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("families", nargs="*")
    args = parser.parse_args(argv)
    import torch
    import transformers as tf

    warnings.simplefilter("ignore")
    families = args.families or sorted(p.parent.name for p in fixtures.OUT.glob("*/model.onnx"))
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, fixtures.VOCAB, (2, 6), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    ids[1, :2] = 0
    failed = 0
    for family in families:
        source = fixtures.OUT / family
        with tempfile.TemporaryDirectory() as tmp:
            original, grafted = Path(tmp) / "original", Path(tmp) / "grafted"
            for folder in (original, grafted):
                folder.mkdir()
                shutil.copyfile(source / "config.json", folder / "config.json")
            shutil.copyfile(source / "model.onnx", original / "model.onnx")
            rows = [] if family in ROWS_256 else ["--max-len", "256"]
            done = subprocess.run([args.edgepe, "graft", str(source / "model.onnx"), "--out",
                                   str(grafted / "model.onnx"), *rows], capture_output=True,
                                  text=True)
            if done.returncode != 0:
                print(f"{family}: graft failed: {done.stderr.strip()}")
                failed += 1
                continue
            theirs = generate(original, ids, mask, args.tokens)
            mine = generate(grafted, ids, mask, args.tokens)
        torch.manual_seed(fixtures.SEED)
        lm = tf.AutoModelForCausalLM.from_config(fixtures.config(family)).eval()
        with torch.no_grad():
            ref = lm.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.tokens,
                              min_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
        same, as_torch = torch.equal(mine, theirs), torch.equal(mine, ref)
        failed += not (same and as_torch)
        print(f"{family}: {args.tokens} new tokens x 2 rows; grafted == original: {same}; "
              f"grafted == torch: {as_torch}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
