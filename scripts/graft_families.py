"""Issue 40 point 7: every family's tiny model in three export forms, grafted with no PE given.

For each ``(family, form)`` cell: build the seeded random-weight model from a transformers config
object (``tests/_hf_models.py``, plus the families of the real-models issue below), export it,
``graft_found`` it, then run the grafted model against the original ONNX (64 ulp of the largest
logit, graft's own proof's bound) and against torch (1e-4 relative: onnxruntime's kernels sum in
another order) at several batch sizes, lengths, cache offsets and left padding; time both models
in onnxruntime and count their bytes (external data included).

Forms:
  ``dynamo-ext``  ``torch.onnx.export(model, (input_ids,), dynamo=True)``, no cache, re-saved
                  with every initializer in ``model.onnx.data`` (graft writes external data back)
  ``dynamo-kv``   ``tests/_hf_models.export``: dynamo, ``input_ids``, mask, (positions), past
                  keys/values -> logits and presents (decoders and Marian only)
  ``torchscript`` ``dynamo=False`` (opset 18), no cache: ``input_ids``, mask, positions
                  (``hf.export_torchscript``; encoders, T5, Whisper: ``input_ids`` alone)

Each cell runs in its own subprocess (a hung export or a crash is a cell's result, not the
run's) and writes ``OUT/<family>__<form>.json`` atomically: a rerun skips the cells already
there (resumable), and runs started on disjoint ``--families`` share one ``OUT`` (parallel-safe).

    python scripts/graft_families.py --out /tmp/fam                 # the whole matrix
    python scripts/graft_families.py --out /tmp/fam --families gpt2 bert --jobs 2
    python scripts/graft_families.py --out /tmp/fam --report        # markdown table + bench JSON
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import _hf_models as hf  # noqa: E402

FORMS = ("dynamo-ext", "dynamo-kv", "torchscript")
# The real-models issue's families that tests/_hf_models.py does not build (its config()
# answers the rest): tiny configs of the same shape as its own (width 32, 4 heads, 2 layers).
EXTRA = ("qwen3", "stablelm", "olmo2", "gpt_bigcode", "falcon-rotary", "deepseek_v3")
FAMILIES = ("llama", "llama-linear", "llama-dynamic", "llama-llama3", "llama-yarn", "mistral",
            "qwen2", "phi", "gpt_neox", "gptj", "gpt2", "opt", "phi3-longrope", "xglm", "bloom",
            "marian", "mpt", *hf.FAMILIES_40, *EXTRA)
# No cache form: encoders, and T5/Whisper/Qwen2-VL (their cache forms are not in this harness).
NO_KV = {"bert", "roberta", "modernbert", "t5", "whisper", "qwen2_vl"}
NO_KV_WHY = {  # the encoder-decoders' and Qwen2-VL's cache forms are not built here
    "t5": "not in this harness: T5's decoder with its KV cache (Optimum's and torch.onnx's) "
          "grafts, every output 0 ulp (docs/readme/graft-hf.md)",
    "whisper": "not in this harness (an encoder-decoder)",
    "qwen2_vl": "not in this harness (its cache form is a vision-language model's)"}
# Tables of positions graft builds for RoPE: 64 rows cover every case below (and keep the proof
# short); learned and sinusoidal tables keep the model's own length.
ROPE_MAX_LEN = 64
LEARNED = {"gptj", "gpt2", "opt", "bert", "roberta", "xglm", "whisper", "marian", "bloom", "mpt",
           "gpt_bigcode", "falcon-alibi", "t5"}
ULPS = 64  # grafted vs original ONNX: graft's proof's FLOAT_ULPS (tests/test_graft_families.py)
TORCH_RTOL = 1e-4  # vs torch: onnxruntime's fused kernels sum in another order (~3e-6 measured)

_plain_config = hf.config


def config(family: str):
    """``hf.config`` and the EXTRA families."""
    import transformers as tf

    small = {"vocab_size": hf.VOCAB, "hidden_size": 32, "intermediate_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}
    if family == "qwen3":
        return tf.Qwen3Config(**small, num_key_value_heads=2, head_dim=8)
    if family == "stablelm":  # partial rotary (a quarter of the head)
        return tf.StableLmConfig(**small, num_key_value_heads=4)
    if family == "olmo2":
        return tf.Olmo2Config(**small, num_key_value_heads=2)
    if family == "gpt_bigcode":  # learned table, multi-query attention
        return tf.GPTBigCodeConfig(vocab_size=hf.VOCAB, n_embd=32, n_layer=2, n_head=4,
                                   n_positions=128)
    if family == "falcon-rotary":
        return tf.FalconConfig(**{k: v for k, v in small.items() if k != "intermediate_size"},
                               alibi=False, new_decoder_architecture=True,
                               num_kv_heads=2)
    if family == "deepseek_v3":  # MLA: RoPE on a 16-wide slice of each head
        return tf.DeepseekV3Config(**small, num_key_value_heads=4, qk_rope_head_dim=8,
                                   qk_nope_head_dim=8, v_head_dim=8, kv_lora_rank=16,
                                   q_lora_rank=16, first_k_dense_replace=2)
    return _plain_config(family)


hf.config = config  # export_simple and model() read the module's config


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a shared 2-core machine: one thread, comparable timings
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.iterdir()
               if p.name.startswith(path.name))


def _ids(batch: int, seq: int, pad: int, seed: int) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(3, hf.VOCAB, size=(batch, seq)).astype(np.int64)
    ids[-1, :pad] = 1  # left padding in the last row (pad id 1)
    return ids


def _simple_cases(session, module, out_session):
    """``(batch, seq, pad)`` on ``input_ids`` alone: worst ulps vs ONNX, worst error vs torch."""
    import torch

    worst_ulps, worst_torch = 0.0, 0.0
    for i, (batch, seq, pad) in enumerate([(1, 1, 0), (3, 5, 0), (2, 17, 0), (2, 9, 3)]):
        ids = _ids(batch, seq, pad, i)
        want = session.run(None, {"input_ids": ids})[0]
        got = out_session.run(None, {"input_ids": ids})[0]
        peak = max(float(np.abs(want).max()), 1e-30)
        worst_ulps = max(worst_ulps, float(np.abs(got - want).max() / np.spacing(np.float32(peak))))
        with torch.no_grad():
            ref = module(torch.from_numpy(ids)).numpy()
        worst_torch = max(worst_torch, float(np.abs(got - ref).max() / max(1.0, peak)))
    return worst_ulps, worst_torch


def _kv_feeds(family: str, session, batch: int, seq: int, past: int, pad: int, seed: int):
    """The cache form's inputs by the graph's own names: ``pad`` masked tokens at the start of
    the last row's past (left padding), its positions counting only the real ones."""
    lm = hf.model(family)
    if family in hf.ENC_DEC:
        args, names = hf.seq2seq_inputs(lm, batch=batch, seq=seq + past, target=seq, past=past,
                                        seed=seed)
        feeds = {n: a.numpy() for n, a in zip(names, args, strict=True)}
        feeds[names[1]][-1, :pad] = 0
        return feeds, None
    with_positions = any(i.name == "position_ids" for i in session.get_inputs())
    args, names = hf.example_inputs(lm, batch=batch, seq=seq, past=past,
                                    with_positions=with_positions, seed=seed)
    feeds = {n: a.numpy().copy() for n, a in zip(names, args, strict=True)}
    feeds["attention_mask"][-1, :pad] = 0
    if with_positions:
        feeds["position_ids"][-1] -= pad
    return feeds, lm


def _kv_cases(family: str, session, out_session):
    worst_ulps, worst_torch = 0.0, 0.0
    for i, (batch, seq, past, pad) in enumerate([(1, 1, 5, 0), (2, 5, 3, 0), (3, 4, 11, 0),
                                                 (2, 3, 6, 2)]):
        feeds, _ = _kv_feeds(family, session, batch, seq, past, pad, i)
        want = session.run(None, feeds)[0]
        got = out_session.run(None, feeds)[0]
        peak = max(float(np.abs(want).max()), 1e-30)
        worst_ulps = max(worst_ulps, float(np.abs(got - want).max() / np.spacing(np.float32(peak))))
        ref = hf.torch_outputs(family, feeds)[0]
        worst_torch = max(worst_torch, float(np.abs(got - ref).max() / max(1.0, peak)))
    return worst_ulps, worst_torch


def _masked_cases(family: str, session, out_session):
    """``hf.export_torchscript``'s inputs: left padding in the last row, positions at an offset;
    the padded tokens' logits are the model's own business (left out against torch)."""
    import torch

    lm = hf.model(family)
    worst_ulps, worst_torch = 0.0, 0.0
    for i, (batch, seq, pad, shift) in enumerate([(1, 1, 0, 5), (3, 7, 0, 0), (2, 9, 3, 0),
                                                  (2, 6, 0, 40)]):
        # the exporter drops an input the model does not read (Bloom: position_ids)
        names = {i.name for i in session.get_inputs()}
        feeds = {k: v for k, v in _masked_feeds(batch, seq, pad, shift, i).items() if k in names}
        want = session.run(None, feeds)[0]
        got = out_session.run(None, feeds)[0]
        peak = max(float(np.abs(want).max()), 1e-30)
        worst_ulps = max(worst_ulps, float(np.abs(got - want).max() / np.spacing(np.float32(peak))))
        with torch.no_grad():
            ref = lm(**{k: torch.from_numpy(v) for k, v in feeds.items()},
                     use_cache=False).logits.numpy()
        rows = feeds["attention_mask"].astype(bool)
        worst_torch = max(worst_torch, float(np.abs(got - ref)[rows].max() / max(1.0, peak)))
    return worst_ulps, worst_torch


def _masked_feeds(batch: int, seq: int, pad: int, shift: int, seed: int) -> dict:
    ids = _ids(batch, seq, 0, seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, :pad] = 0
    positions = np.broadcast_to(np.arange(seq) + shift, (batch, seq)).copy()
    positions[-1] = np.maximum(np.cumsum(mask[-1]) - 1, 0) + shift
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


def _latency(session, feeds, runs: int = 30) -> float:
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _export(family: str, form: str, folder: Path):
    import onnx

    if form == "dynamo-kv":
        if family in NO_KV:
            return None, NO_KV_WHY.get(family, "no cache form (an encoder)")
        return hf.export(family, folder), None
    if form == "torchscript" and family in hf.ENC_DEC:
        return None, ("this harness's TorchScript wrapper is a decoder's (input_ids, mask, "
                      "positions)")
    if form == "torchscript" and family not in NO_KV:
        # input_ids alone does not export so (transformers 5.24's mask calls aten::diff, which
        # TorchScript has no ONNX for): the mask and positions are inputs
        return hf.export_torchscript(family, folder), "masked"
    path, module = hf.export_simple(family, folder, dynamo=form != "torchscript")
    if form == "dynamo-ext":  # its weights in model.onnx.data (small shape constants stay inline:
        # onnxruntime reads a shape argument from the file itself, and torch writes them so too)
        model = onnx.load(str(path))
        # torch already wrote some weights to model.onnx.data, and onnx's writer appends to an
        # existing data file: the original's bytes then counted torch's copy, referenced by
        # nothing (90-200 kB of the grafted files' "savings" last round)
        (path.parent / "model.onnx.data").unlink(missing_ok=True)
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="model.onnx.data", size_threshold=1024)
    return path, module


def cell(family: str, form: str, folder: Path) -> dict:
    """One cell's result: ``status`` one of ``grafts``, ``refused`` (graft's one line),
    ``fails`` (graft or a comparison), ``export fails``, ``n/a``."""
    from edgepe.contract.errors import EdgepeError
    from edgepe.graft import graft_found

    result = {"family": family, "form": form}
    start = time.perf_counter()
    try:
        path, module = _export(family, form, folder)
    except Exception as exc:  # noqa: BLE001 -- an export failure is this cell's finding
        while exc.__cause__ is not None:  # torch's TorchExportError wraps the cause
            exc = exc.__cause__
        return {**result, "status": "export fails", "line": f"{type(exc).__name__}: "
                f"{next((x for x in str(exc).splitlines() if x.strip()), '')[:300]}"}
    if path is None:
        return {**result, "status": "n/a", "line": module}
    result["export_s"] = round(time.perf_counter() - start, 1)
    out = folder / "grafted.onnx"
    start = time.perf_counter()
    try:
        report = graft_found(path, out, force=True,
                             max_len=None if family in LEARNED else ROPE_MAX_LEN)
    except EdgepeError as exc:
        return {**result, "status": "refused", "line": str(exc)}
    except Exception as exc:  # noqa: BLE001 -- a crash in graft is a finding, named
        return {**result, "status": "fails",
                "line": f"graft: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    result["graft_s"] = round(time.perf_counter() - start, 1)
    result["found"] = report.found
    if not all(c.passed for c in report.checks):
        return {**result, "status": "fails", "line": "graft's proof: a check did not pass"}
    session, out_session = _session(path), _session(out)
    try:
        if form == "dynamo-kv":
            ulps, rel = _kv_cases(family, session, out_session)
            feeds, _ = _kv_feeds(family, session, 1, 1, 16, 0, 0)
        elif module == "masked":
            ulps, rel = _masked_cases(family, session, out_session)
            names = {i.name for i in session.get_inputs()}
            feeds = {k: v for k, v in _masked_feeds(1, 16, 0, 0, 0).items() if k in names}
        else:
            ulps, rel = _simple_cases(session, module, out_session)
            feeds = {"input_ids": _ids(1, 16, 0, 0)}
    except Exception as exc:  # noqa: BLE001
        return {**result, "status": "fails",
                "line": f"compare: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    result.update(ulps=ulps, torch_rel=rel,
                  status="grafts" if ulps <= ULPS and rel <= TORCH_RTOL else "fails")
    if result["status"] == "fails":
        result["line"] = f"outputs differ: {ulps:.0f} ulp vs ONNX, {rel:.2e} vs torch"
    if form == "dynamo-kv":
        try:
            session.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 -- the original's own limit, said in the cell
            # Gemma3's cache export gathers its sliding-window mask at indices traced from the
            # example (the original itself fails past 16 tokens): timed at graft's own decode
            # step, one token after 8 cached
            feeds, _ = _kv_feeds(family, session, 1, 1, 8, 0, 0)
            result["latency_note"] = ("timed at 1 token after 8 cached: the original fails at 1 "
                                      f"after 16 ({type(exc).__name__})")
    result.update(original_s=_latency(session, feeds), grafted_s=_latency(out_session, feeds),
                  original_bytes=_bytes(path), grafted_bytes=_bytes(out))
    return result


def _run_cell(family: str, form: str, out: Path, timeout: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--cell", family, form, "--out", str(out),
                             "--timeout", str(timeout)])


def _write(out: Path, result: dict) -> None:
    target = out / f"{result['family']}__{result['form']}.json"
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True))
    tmp.replace(target)  # atomic: a reader never sees half a cell


def _short(r: dict) -> str:
    """A table cell: what graft found (its kind, not the node names) and the worst error, or the
    status and its one line."""
    if r["status"] == "grafts":
        kind = r["found"].removeprefix("found ").split(" (")[0].split(":")[0].rstrip(",")
        # a table added whole besides (Whisper's encoder's): named too
        kind += "".join(f" and {part.split(' (')[0]}" for part in
                        r["found"].split("; also saw ")[0].split("; and ")[1:])
        return f"grafts: {kind} ({r['ulps']:.0f} ulp, {r['torch_rel']:.0e} vs torch)"
    line = re.sub(r"'[^']*/model\.onnx'", "'model.onnx'", r.get("line", ""))  # a cell's temp dir
    return f"{r['status']}: {line}".replace("|", "\\|").replace("\n", " ")


def report(out: Path) -> str:
    """The README's family x form table and the bench table (markdown), ``OUT/bench.json``."""
    cells = {}
    for p in sorted(out.glob("*__*.json")):
        r = json.loads(p.read_text())
        cells[(r["family"], r["form"])] = r
    lines = ["| family | " + " | ".join(FORMS) + " |", "|---" * (len(FORMS) + 1) + "|"]
    bench_lines = ["| family | form | original ms | grafted ms | ratio | original bytes | "
                   "grafted bytes |", "|---|---|---:|---:|---:|---:|---:|"]
    bench = []
    for family in FAMILIES:
        row = [_short(cells[(family, f)]) if (family, f) in cells else "not run" for f in FORMS]
        lines.append(f"| {family} | " + " | ".join(row) + " |")
        for f in FORMS:
            r = cells.get((family, f), {})
            if r.get("status") != "grafts":
                continue
            bench.append({k: r[k] for k in ("family", "form", "original_s", "grafted_s",
                                             "original_bytes", "grafted_bytes")})
            bench_lines.append(
                f"| {family} | {f} | {r['original_s'] * 1e3:.3f} | {r['grafted_s'] * 1e3:.3f} | "
                f"{r['grafted_s'] / r['original_s']:.3f}x | {r['original_bytes']:,} | "
                f"{r['grafted_bytes']:,} |")
    (out / "bench.json").write_text(json.dumps(bench, indent=1))
    return "\n".join(lines) + "\n\n" + "\n".join(bench_lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--forms", nargs="*", default=list(FORMS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--cell", nargs=2, metavar=("FAMILY", "FORM"))
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cell:
        import tempfile

        family, form = args.cell
        with tempfile.TemporaryDirectory() as tmp:
            _write(args.out, cell(family, form, Path(tmp)))
        return 0
    if args.report:
        print(report(args.out))
        return 0
    todo = [(f, m) for f in args.families for m in args.forms
            if not (args.out / f"{f}__{m}.json").exists()]
    running: list = []
    while todo or running:
        while todo and len(running) < args.jobs:
            family, form = todo.pop(0)
            running.append((family, form, time.monotonic(), _run_cell(family, form, args.out,
                                                                      args.timeout)))
        for item in list(running):
            family, form, began, proc = item
            if proc.poll() is None and time.monotonic() - began < args.timeout:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            running.remove(item)
            if not (args.out / f"{family}__{form}.json").exists():
                _write(args.out, {"family": family, "form": form, "status": "fails",
                                  "line": f"the cell's process ended ({proc.returncode}) or ran "
                                          f"past {args.timeout} s without a result"})
            print(family, form, json.loads((args.out / f"{family}__{form}.json").read_text())
                  ["status"], flush=True)
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
