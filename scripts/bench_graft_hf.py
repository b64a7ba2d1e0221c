"""Benchmark of ``edgepe graft`` on transformers models (issue 29): per family, the grafted
model's latency over the original's on onnxruntime CPU (goal <= 1.02x) and the bytes removed.

    python scripts/bench_graft_hf.py [--families llama,gpt2,...] [--models DIR] [--reps 201]
                                     [--quantize int8] [--rope-lowering ort|rotary23]
                                     [--out FILE.json]

Each family's tiny model (tests/_hf_models.py) is exported into ``DIR/FAMILY`` unless already
there (``FAMILY@23``: with ``opset_version=23``, into ``DIR/FAMILY-23``), grafted with no PE
given (the proof runs, as for a user), then both models run in one process, one thread each,
alternating original and grafted ``--reps`` times per workload: ``prefill`` (batch 1, 32 new
tokens) and ``decode`` (batch 1, 1 new token after 128 cached; an encoder-decoder's encoder reads
past + new tokens: 32, then 129; ``simple:FAMILY``, exported with ``input_ids`` alone and no
cache: its "decode" is one token with nothing cached). The
ratio is of medians; the spread is the interquartile range of the per-pair ratios. Tiny models
make the PE a larger share of the time than in a real one: a ratio near 1 here is an upper bound
on what the graft costs a real model, a saving here is larger than it would be there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
FAMILIES = ("llama", "gpt2", "bloom", "gpt_neox", "gptj", "phi", "opt", "xglm", "qwen2",
            "mistral", "llama-yarn", "mpt", "marian")
# families whose PE has its length in the model (tables, MPT's bias): no --max-len
OWN_ROWS = ("gpt2", "opt", "gptj", "xglm", "mpt", "marian", "bert", "roberta", "whisper")
WORKLOADS = {"prefill": (32, 0), "decode": (1, 128)}


def _session(data: bytes):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])


def row(family: str, models: Path, reps: int, quantize: str | None,
        rope_lowering: str | None = None) -> dict:
    import contextlib
    import io
    import warnings

    import _hf_models

    import edgepe
    from edgepe.graft.prove import hf_feeds
    from edgepe.graft.read import load_model

    name, _, opset = family.partition("@")  # "llama@23": exported with opset_version=23
    # "simple:cohere": issue 40's export, input_ids alone, no cache (_hf_models.export_simple)
    simple = name.startswith("simple:")
    name = name.removeprefix("simple:")
    path = models / family.replace("@", "-").replace(":", "-") / "model.onnx"
    if not path.exists():
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            if simple:
                _hf_models.export_simple(name, path.parent)
            else:
                _hf_models.export(name, path.parent, opset=int(opset) if opset else None)
    options = {"quantize": quantize} if quantize else {}
    if rope_lowering:
        options["rope_lowering"] = rope_lowering
    if name not in OWN_ROWS:
        options["max_len"] = 256
    report = edgepe.graft(path, **options)
    assert report, str(report)
    original, _ = load_model(path)
    before, after = _session(original.SerializeToString()), _session(
        report.model.SerializeToString())
    result = {"family": family, "found": report.found, "bytes_before": report.bytes_before,
              "bytes_after": report.bytes_after, "bytes_removed": report.saved,
              "removed_nodes": report.removed_nodes}
    rng = np.random.default_rng(0)
    for name, (seq, past) in WORKLOADS.items():
        feeds = hf_feeds(before, seq, past, 0, 256, rng)
        feeds = {k: v[:1] if v.ndim else v for k, v in feeds.items()}  # batch 1
        for session in (before, after):  # warm up
            for _ in range(5):
                session.run(None, feeds)
        times = {"original": [], "grafted": []}
        for _ in range(reps):
            for label, session in (("original", before), ("grafted", after)):
                start = time.perf_counter()
                session.run(None, feeds)
                times[label].append(time.perf_counter() - start)
        a, b = np.asarray(times["original"]), np.asarray(times["grafted"])
        pairs = b / a
        result[name] = {"original_us": float(np.median(a) * 1e6),
                        "grafted_us": float(np.median(b) * 1e6),
                        "ratio": float(np.median(b) / np.median(a)),
                        "ratio_iqr": [float(np.percentile(pairs, 25)),
                                      float(np.percentile(pairs, 75))]}
    return result


def markdown(rows: list[dict]) -> str:
    lines = ["| family | found | prefill ratio (IQR) | decode ratio (IQR) | bytes removed |",
             "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r[w]['ratio']:.3f}x ({r[w]['ratio_iqr'][0]:.2f}-{r[w]['ratio_iqr'][1]:.2f})"
                 for w in WORKLOADS]
        found = "; ".join(part.split(" at ")[0] for part in  # an encoder-decoder: two PEs
                          r["found"].removeprefix("found ").split("; ")).replace("|", "\\|")
        lines.append(f"| {r['family']} | {found} | {cells[0]} | {cells[1]} | "
                     f"{r['bytes_removed']:,} of {r['bytes_before']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--models", type=Path, default=Path("hf-models"))
    parser.add_argument("--reps", type=int, default=201)
    parser.add_argument("--quantize", choices=("int8",), default=None)
    parser.add_argument("--rope-lowering", choices=("ort", "rotary23"), default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = [row(f, args.models, args.reps, args.quantize, args.rope_lowering)
            for f in args.families.split(",")]
    print(markdown(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
