"""Put an edgepe PE artifact inside a user's ONNX model, and prove the model unchanged.

    from edgepe import graft
    report = graft("model.onnx", pe="models/binary-compute-L512-d64.onnx",
                   at="/pe/projection/MatMul_output_0", positions="arange:x", out="out.onnx")
    print(report)               # what was removed and added, bytes, max error per output
    report = graft("model.onnx", scheme="binary", quantize="int8", out="out.onnx")

What happens (issue 18):

- The PE's output replaces tensor ``at`` (``add=True``: is added to it, for a model that has no
  PE yet). The producer subgraph of ``at`` is removed where nothing else uses it, with its
  initializers (a ``[max_len, n_bits]`` float table and its projection weight, typically).
- The PE's ``positions`` input is wired to the model: an existing integer input (``position_ids``;
  any rank, flattened and the encoding reshaped back), a new int64 input ``[S]`` of that name, or
  ``arange:INPUT[:AXIS]``: ``0 .. S - 1`` with ``S`` the size of ``INPUT``'s axis (default 1 for
  ``[B, S, ...]`` inputs, 0 for ``[S]``) by Shape, Squeeze and Range. ``[S, D]`` becomes ``[1, S,
  D]`` when the replaced tensor has more axes.
- Opsets are reconciled by ``onnx.version_converter`` (the lower side converted up; DESIGN: torch's
  dynamo exporter writes IR 10, edgepe IR 8); the result's IR version is the highest of the two
  models' and of what its opsets need. Every PE name gets a prefix (``onnx.compose.add_prefix``)
  that no name in the model starts with, so grafting twice never collides. The PE's manifest goes
  into ``metadata_props`` under ``edgepe.graft.<n>``. The result passes ``onnx.checker`` (full).
- Then ``prove``: onnxruntime CPU runs the original and the grafted model at several sequence
  lengths (up to ``max_len``, so positions reach ``max_len - 1``) on random inputs and compares
  every output within the PE's tolerance propagated through the model (see ``prove``).

``--scheme ID`` finds the PE itself (``detect``): a constant bit table ``[.., L, n_bits(L)]``
sliced or gathered by position, then a MatMul by a constant ``[n_bits, D]`` weight: the demo
notebook's module as both torch.onnx exporters emit it. The weight is read from the model; the
matching artifact is built in memory and grafted.

The artifact is untrusted input: it is read through ``runtime.read_artifact_manifest`` (fields
checked, file checked against its sha256; ``_read_artifact`` is the one call site), its bytes are
bounded and hashed again as read, and a model or artifact that names external data is refused
(no path it names is opened).

One file per role: ``read`` (the model and the artifact as untrusted input), ``find`` (the PE
in a model; ``find_hf`` by an exporter's node patterns, ``discover`` by the values the candidate
tensors take on onnxruntime, issue 40), ``splice`` (``graft_model``), ``prove`` (onnxruntime
against the original), ``report`` (what it did, in words); this module holds the whole command,
``graft``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

from edgepe.contract.commit import cannot_write, target_lock, temp_prefix, write_temp
from edgepe.contract.config import check_output
from edgepe.contract.errors import BadParameterError
from edgepe.graft.discover import accepted_together, confirm, discover, whole_sinusoids
from edgepe.graft.find import (
    DETECTABLE,
    Candidate,
    _constants,
    build_detected,
    detect,
    foreign_ops,
    graph_index,
    op,
)
from edgepe.graft.find_hf import (
    DEFAULT_MAX_LEN,
    Found,
    build_found,
    check_hf_config,
    find_pe,
    looked_for,
    merge_duplicates,
    streams,
)
from edgepe.graft.lower import (
    LOWERINGS,
    check_lowered,
    feed_tables,
    lower_interleaved,
    lower_rope,
    to_opset,
)
from edgepe.graft.mrope import build as build_mrope
from edgepe.graft.mrope import check_config as check_mrope_config
from edgepe.graft.mrope import prove_streams
from edgepe.graft.prove import (
    check_overridable,
    pe_tolerance,
    proof_manifest,
    prove,
    prove_found,
    table_pe,
)
from edgepe.graft.read import MODEL_BYTES_LIMIT, load_model, load_pe, parse_model
from edgepe.graft.report import GraftReport, OutputCheck
from edgepe.graft.splice import (
    METADATA_KEY,
    PREFIX,
    Grafted,
    Positions,
    _opset,
    graft_model,
    reconcile,
    splice_found,
)
from edgepe.graft.t5 import build_t5
from edgepe.graft.t5 import declared_max_len as t5_max_len

# The most positions a PE graft finds itself may cover (issue 41: --max-len 2^63 ran forever in
# the sliced tables' recipe check, linear in max_len; a float32 position, as the models compute
# their angles, is a whole number only up to 2^24).
MAX_LEN_LIMIT = 1 << 24

# --- the whole command ------------------------------------------------------------------------


def graft(model: str | Path, pe: str | Path | None = None, at: str | None = None,
          positions: str | Positions | None = None, out: str | Path | None = None,
          scheme: str | None = None, add: bool = False, check: bool = True, force: bool = False,
          lengths: Sequence[int] | None = None, seed: int = 0, max_len: int | None = None,
          checkpoint: str | Path | None = None, hf_config: dict | None = None,
          **export_options) -> GraftReport:
    """Graft a PE into the model at ``model`` and prove it; write ``out`` if the proof holds.

    Either ``pe`` (an edgepe ONNX artifact) with ``at``, or ``scheme`` (found by ``detect``;
    ``export_options`` go to ``api.make_config``), or neither: ``graft_found`` finds the PE of a
    transformers export itself. ``check=False`` skips ``prove``. Returns a
    ``GraftReport``, falsy when an output differs beyond its tolerance (then nothing is written).
    Bad input raises an ``EdgepeError`` before anything is written; an existing ``out`` is only
    replaced with ``force``, and never the model, ``pe`` or its manifest. The proof's tolerance
    comes from this edgepe's rebuild of ``pe`` (``proof_manifest``; ``checkpoint``: the weights
    an int8 ``pe`` was exported from), never from ``pe``'s manifest.
    """
    if pe is not None and scheme is not None:
        raise BadParameterError("graft takes --pe ARTIFACT --at TENSOR, or --scheme ID, or "
                                "neither (it finds the PE), not both")
    if pe is not None and not at:
        raise BadParameterError("--pe needs --at TENSOR: the tensor the PE replaces")
    if hf_config is not None and (pe is not None or scheme is not None):
        raise BadParameterError("--from-hf-config goes with a PE graft finds itself (no --pe, "
                                "no --scheme)")
    if pe is None and scheme is None:
        if checkpoint is not None:
            raise BadParameterError("--checkpoint goes with --pe (the weights an int8 artifact "
                                    "was exported from)")
        return graft_found(model, out=out, check=check, force=force, lengths=lengths, seed=seed,
                           max_len=max_len, hf_config=hf_config, **export_options)
    if max_len is not None:
        raise BadParameterError("--max-len goes with a PE graft finds itself (no --pe, no "
                                "--scheme)")
    if export_options and scheme is None:
        raise BadParameterError(f"{', '.join(sorted(export_options))}: export options go with "
                                "--scheme (an artifact given with --pe is already exported)")
    # The one output rule: never the model, its external data, the artifact or its manifest,
    # --force or not (the data files the model names are added once it is read).
    inputs = [Path(model), _data_path(Path(model)), *([Path(pe)] if pe is not None else []),
              *([Path(checkpoint)] if checkpoint is not None else [])]
    if out is not None:
        out = Path(out)
        check_output(out, inputs, force)
    named = len(inputs)
    original, size = load_model(model, inputs)
    # the model came with external data (read, or the usual MODEL.data beside it): so does OUT
    external = len(inputs) > named or inputs[1].exists()
    if out is not None:
        check_output(out, inputs, force)
    if scheme is not None:
        candidates = detect(original, scheme)
        if not candidates:
            raise BadParameterError(
                f"no '{scheme}' PE found in {str(model)!r}: looked for a constant bit table "
                "[.., L, n_bits(L)] sliced or gathered by position, then MatMul by a constant "
                "[n_bits, D] weight; pass --pe ARTIFACT --at TENSOR instead")
        if at is not None:
            chosen = [c for c in candidates if c.at == at]
            if not chosen:
                raise BadParameterError(
                    f"no '{scheme}' PE makes tensor {at!r}; found at "
                    f"{', '.join(repr(c.at) for c in candidates)}")
            candidates = chosen
        if len(candidates) > 1:
            raise BadParameterError(
                f"{len(candidates)} '{scheme}' PE subgraphs found in {str(model)!r} (at "
                f"{', '.join(repr(c.at) for c in candidates)}); graft one with --at TENSOR")
        found = candidates[0]
        pe_model, manifest = build_detected(found, scheme, **export_options)
        at, positions = found.at, positions or found.positions
        kind = "int8" if manifest["inputs"]["quantize"] == "int8" else manifest["dtype"]
        name = f"{scheme} ({manifest['mode']}, {kind}) built from {found.table!r} and " \
               f"{found.weight_name!r}"
    else:
        pe_model, manifest = load_pe(pe)
        name = f"{manifest['scheme']} ({manifest['mode']}) from {str(pe)!r}"
    grafted = graft_model(original, pe_model, manifest, at, positions, add)
    check_overridable(original, grafted.model)  # --no-check or not: never frozen silently
    grafted_bytes = grafted.model.ByteSize()
    report = GraftReport(name, at, str(grafted.positions), grafted.prefix,
                         grafted.removed_nodes, grafted.removed_bytes, grafted.pe_bytes, size,
                         grafted_bytes, grafted.metadata_bytes,
                         f"opset {_opset(original)} -> {_opset(grafted.model)}"
                         if grafted.converted else None, model=grafted.model)
    if check:
        held_to = manifest if pe is None else proof_manifest(pe, manifest, checkpoint)
        report.lengths, report.checks = prove(original, grafted, pe_model, held_to,
                                              lengths=lengths, seed=seed)
    if report and out is not None:
        write_model(grafted.model, out, external=grafted_bytes > MODEL_BYTES_LIMIT or
                    external, inputs=inputs, force=force)
        report.out = out
    return report


def graft_found(model: str | Path, out: str | Path | None = None, check: bool = True,
                force: bool = False, lengths: Sequence[int] | None = None, seed: int = 0,
                max_len: int | None = None, quantize: str | None = None,
                rope_lowering: str | None = None, mode: str | None = None,
                hf_config: dict | None = None, **unused) -> GraftReport:
    """``graft`` with no PE given: ``find_pe`` finds it, ``build_found`` builds its artifact,
    ``splice_found`` puts it in, ``prove_found`` proves every output unchanged; two or more
    candidates are refused unless they are one PE per input stream (``find_hf.streams``: an
    encoder-decoder's encoder and decoder tables), then each is replaced, all proven together
    (not with ``rope_lowering``: one RoPE); a table added whole (``discover.whole_sinusoids``:
    Whisper's encoder ``sinusoids``, issue 40 point 2) is replaced besides, by edgepe's
    ``sinusoidal`` (``find_hf.build_whole``; ``mode`` ``sliced`` slices it while a learned table
    found with it stays rows), its own record after the others'; ``out`` is written
    (as external data beside it when the model came so, or is over 2 GiB) only if that holds.
    ``max_len``: the positions the tables cover (default ``DEFAULT_MAX_LEN``); ``mode`` (RoPE):
    ``table``, ``sliced`` (no table of positions, no trig), or ``None`` (the table while it fits
    ``find_hf.TABLE_BYTES_LIMIT``, else sliced); ``rope_lowering`` ``'ort'``: also fuse the
    rotations into onnxruntime's RotaryEmbedding, ``'rotary23'``: into ONNX's (opset 23; the model
    converted up to it first, ``lower.to_opset``): ``lower.lower_rope`` (half layout),
    ``lower_interleaved`` (GPT-J), ``feed_tables`` (the ops already there); ``hf_config``: the
    model's parsed ``config.json`` (``find_hf.check_hf_config``: the PE found must be what it
    says, RoPE's frequencies edgepe's own for it; its ``max_position_embeddings`` is the default
    ``max_len``).
    """
    if unused:
        raise BadParameterError(f"{', '.join(sorted(unused))}: not an option of a PE graft finds "
                                "itself (it takes --max-len, --mode, --quantize, "
                                "--rope-lowering)")
    if rope_lowering is not None and rope_lowering not in LOWERINGS:
        raise BadParameterError(
            f"--rope-lowering {rope_lowering!r}: choose ort (com.microsoft.RotaryEmbedding) or "
            "rotary23 (the ONNX opset 23 RotaryEmbedding)")
    if quantize not in (None, "none", "int8"):
        raise BadParameterError(f"--quantize {quantize!r}: choose none or int8")
    if max_len is not None and not 1 <= max_len <= MAX_LEN_LIMIT:
        raise BadParameterError(
            f"--max-len must be 1 .. {MAX_LEN_LIMIT:,} (2^24: past it float32 positions are "
            f"not whole numbers, and the tables' checks take time linear in it), got {max_len}")
    # The one output rule, for OUT and its external data beside it: never the model or its data.
    inputs = [Path(model), _data_path(Path(model))]
    if out is not None:
        out = Path(out)
        check_output(out, inputs, force)
    original, size = load_model(model, inputs)
    external = len(inputs) > 2 or inputs[1].exists()  # as in graft
    if out is not None:
        check_output(out, inputs, force)
    # tables no positions gather, added whole: Whisper's encoder (issue 40 point 2), replaced
    # besides the PE found below (the decoder's), each by its own artifact; looked for first,
    # so that a table's Gather by an unfolded Range of constants is not a second candidate there
    whole, whole_seen = whole_sinusoids(original)
    taken = {name for one in whole for name in one.replaces}
    # a table find_pe matched must be gathered by positions, by its values (issue 40)
    found, seen = confirm(original, [f for f in find_pe(original)
                                     if taken.isdisjoint(f.replaces)])
    together = False
    if not found or (len(found) > 1 and streams(original, found) is None):
        # the exporter's graph shapes unknown to find_pe: the PE found by its values (issue 40)
        discovered, more = discover(original)
        discovered = [f for f in discovered if taken.isdisjoint(f.replaces)]
        seen = list(dict.fromkeys([*seen, *more]))
        together = accepted_together(discovered)
        if len(discovered) == 1 or together or (discovered and not found):
            found = discovered
    seen = list(dict.fromkeys([*seen, *whole_seen]))
    if not found and not whole:
        # named like ONNX's ops, not read as them; subgraphs graft does not search
        seen += [*foreign_ops(original.graph), *_unsearched(original)]
        raise BadParameterError(
            f"no PE found in {str(model)!r}: looked for {looked_for()}"
            + (f"; saw {'; '.join(seen)}" if seen else "") +
            "; pass --pe ARTIFACT --at TENSOR or --scheme ID instead")
    per_stream = streams(original, found) if len(found) > 1 and not together else None
    if len(found) > 1 and ((per_stream is None and not together) or rope_lowering):
        raise BadParameterError(
            f"{len(found)} PE candidates in {str(model)!r}: "
            + "; ".join(f.describe() for f in found) + "; graft one with --pe ARTIFACT --at TENSOR"
            + ("" if per_stream is None else " (one per input stream: graft replaces them all, "
               "without --rope-lowering)"))
    if whole and rope_lowering:
        raise BadParameterError(f"--rope-lowering fuses one RoPE; {str(model)!r} also adds "
                                f"{whole[0].describe()}: graft it without --rope-lowering")
    main, found = len(found), [*found, *whole]
    pick = found[0]
    hf_records: list[dict | None] = [None] * len(found)
    given = max_len
    if hf_config is not None:  # every PE found must be what the config says
        for i, one in enumerate(found[:main]):  # (a whole table: its values are checked)
            against = check_mrope_config if one.family == "mrope" else check_hf_config
            max_len, hf_records[i] = against(one, hf_config, given)
    max_len_from = None  # where the positions' count came from, when --max-len was not given
    if given is None:
        if max_len is not None:
            max_len_from = f"max_position_embeddings {max_len} of --from-hf-config"
        elif main:
            max_len, max_len_from = declared_max_len(original, found[:main])
    if max_len is not None and not 1 <= max_len <= MAX_LEN_LIMIT:  # (a config's, a model's)
        raise BadParameterError(
            f"{max_len_from or '--max-len'}: the positions must be 1 .. {MAX_LEN_LIMIT:,} "
            f"(2^24: past it float32 positions are not whole numbers), got {max_len}; give "
            "--max-len")
    # An encoder-decoder (``find_hf.streams``): one PE per input stream, each replaced by its
    # own artifact (edgepe.graft.0, .1, ...), all proven together.
    grafted, replaces, length, bound, records, bounds = original, [], None, 0.0, [], {}
    for one, hf_record in zip(found, hf_records, strict=True):
        # (issue 40 point 3: edgepe/graft/t5.py, edgepe/graft/mrope.py)
        build = {"t5-bias": build_t5, "mrope": build_mrope}.get(one.family, build_found)
        # --mode sliced beside a whole table: for it (and a RoPE), a learned table stays rows
        pe_model, record = build(original, one, max_len, quantize=quantize or "none",
                                 mode=None if mode == "sliced" and whole and "table" in
                                 one.params and not one.params.get("whole") else mode)
        if hf_record is not None:
            record["hf_config"] = hf_record
        # the same caches computed more than once (opset-23 exports): one artifact for all
        base, merged_away = merge_duplicates(grafted if grafted is original else grafted.model,
                                             one)
        step = splice_found(base, pe_model,
                            dict(zip((o.name for o in pe_model.graph.output), one.replaces,
                                     strict=True)),
                            one.positions, record, condition=record.get("condition"))
        step.removed_nodes += merged_away
        if grafted is not original:  # the totals over every PE put in
            for key in ("removed_nodes", "removed_bytes", "pe_bytes", "metadata_bytes"):
                setattr(step, key, getattr(step, key) + getattr(grafted, key))
            step.at, step.prefix = f"{grafted.at}; {step.at}", f"{grafted.prefix}, {step.prefix}"
        grafted, replaces, records = step, [*replaces, *one.replaces], [*records, record]
        reach = record["max_len"] - record.get("offset", 0)
        own = record.get("proof_bound", record.get("quant", {}).get("bound", 0.0))
        bound, bounds = max(bound, own), {**bounds, **dict.fromkeys(one.replaces, own)}
        if main and one.params.get("whole"):  # its rows all checked whatever the sequence
            continue
        length = reach if length is None else min(length, reach)
    record = records[max(main, 1) - 1]  # the PE found first's (a whole table's if none)
    check_overridable(original, grafted.model)  # --no-check or not: never frozen silently
    if rope_lowering:
        if pick.family != "rope":
            raise BadParameterError(f"--rope-lowering: the PE found is {pick.family} "
                                    f"{pick.where.split(' at ')[0]}, not RoPE")
        opset = _opset(grafted.model)
        if pick.params.get("fused") and rope_lowering != "rotary23":
            raise BadParameterError("--rope-lowering ort: this model rotates with ONNX's "
                                    "RotaryEmbedding (opset 23) already; --rope-lowering "
                                    "rotary23 feeds it graft's tables")
        if rope_lowering == "rotary23":
            grafted.model = to_opset(grafted.model)
        if pick.params.get("fused"):
            fused, gone = feed_tables(grafted.model, grafted.prefix, *pick.replaces)
        elif pick.params.get("sincos"):  # GPT-J: interleaved
            fused, gone = lower_interleaved(grafted.model, grafted.prefix, pick.replaces[0],
                                            rope_lowering)
        else:
            fused, gone = lower_rope(grafted.model, grafted.prefix, *pick.replaces,
                                     rope_lowering)
        check_lowered(grafted.model)
        grafted.removed_nodes += gone
        record["rope_lowering"] = {"op": LOWERINGS[rope_lowering], "fused": fused}
        if _opset(grafted.model) != opset:
            record["rope_lowering"]["opset"] = f"{opset} -> {_opset(grafted.model)}"
        entry = grafted.model.metadata_props[-1]
        entry.value = json.dumps(record, sort_keys=True)
    kind = "int8" if record["quantize"] == "int8" else record.get("dtype", "float32")
    lowered = (f", rotations fused into RotaryEmbedding"
               f"{' (ONNX opset 23)' if rope_lowering == 'rotary23' else ''} x{fused}"
               + (f", opset {record['rope_lowering']['opset']}"
                  if "opset" in record["rope_lowering"] else "")) if rope_lowering else ""
    how = _how(record)
    count = f" x{main}" if main > 1 else ""
    found_line = (f"found {pick.family}{count}, one per input stream: "
                  + "; ".join(f.where for f in found[:main]) if per_stream else
                  f"found {pick.family}{count}, each replaced: "
                  + "; ".join(f.where for f in found[:main]) if together else
                  f"found {pick.describe()}")
    # the tables added whole besides (Whisper's encoder's, issue 40 point 2), each named
    extra = [(f, r) for f, r in zip(found, records, strict=True)
             if f.params.get("whole") and f is not pick]
    found_line += "".join(f"; and {f.describe()}" for f, _ in extra)
    found_line += f"; also saw {'; '.join(seen)}" if seen else ""
    report = GraftReport(f"{record['scheme']}{count} ({how}, {kind}, {record['max_len']} "
                         f"positions{lowered})" + "".join(
                             f" and {r['scheme']} ({_how(r)}, "
                             f"{'int8' if r['quantize'] == 'int8' else 'float32'}, "
                             f"{r['max_len']} positions, added whole)" for _, r in extra),
                         grafted.at,
                         (", ".join(f.positions for f in found[:main]) if per_stream or together
                          else pick.positions or "none (a Range inside the PE)")
                         + "".join(f", 0..{r['max_len'] - 1} (a Range inside the PE)"
                                   for _, r in extra),
                         grafted.prefix, grafted.removed_nodes,
                         grafted.removed_bytes, grafted.pe_bytes, size, grafted.model.ByteSize(),
                         grafted.metadata_bytes, model=grafted.model, found=found_line,
                         max_len_from=max_len_from)
    if check:
        report.lengths, report.checks = prove_found(
            original, grafted, replaces, length,
            bound=bound,
            lengths=lengths, seed=seed, bounds=bounds,
            # T5's integer buckets: the outputs bit for bit (prove_found)
            exact_outputs=all(f.family == "t5-bias" for f in found))
        for one in (f for f in found if f.family == "mrope"):  # streams the inputs may not vary
            label, checks = prove_streams(original, grafted.model, one, length, bound, seed)
            report.lengths.append(label)
            report.checks += checks
    if report and out is not None:
        write_model(grafted.model, out, external=size > MODEL_BYTES_LIMIT or external,
                    inputs=inputs, force=force)
        report.out = out
    return report


def _unsearched(model) -> list[str]:
    """The graph's nodes that hold subgraphs, in words: graft searches the main graph only, so a
    PE inside an ``If``'s branches (Optimum's ``decoder_model_merged``: the whole decoder, with
    and without its cache, issue 40) is not found; that file's two halves are."""
    out = []
    for node in model.graph.node:
        graphs = [a.g for a in node.attribute if a.HasField("g")]  # (If, Loop, Scan)
        if not graphs:
            continue
        said = (f"{op(node)} {node.name or node.output[0]!r} whose {len(graphs)} "
                f"subgraph{'s' if len(graphs) > 1 else ''} ({sum(len(g.node) for g in graphs):,} "
                "nodes) graft does not search")
        if op(node) == "If" and list(node.input) == ["use_cache_branch"]:
            said += (" (Optimum's decoder_model_merged: graft its decoder_model.onnx and "
                     "decoder_with_past_model.onnx, then merge the two grafted models with "
                     "optimum.onnx.merge_decoders)")
        out.append(said)
    return out


def _how(record: dict) -> str:
    """A PE record's mode in words: ``table``, or ``sliced`` and its slice widths."""
    return record["mode"] + (f" {','.join(map(str, record['slices']))}"
                             if record["mode"] == "sliced" else "")


# Ops that pass their first input's values on, selected or reshaped, never changed.
_SELECTING = ("Slice", "Gather", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Identity",
              "Expand", "Tile", "Flatten")


def declared_max_len(model, found: Sequence[Found]) -> tuple[int | None, str]:
    """``(max_len, where it came from)`` for a graft given no ``--max-len`` (issue 40): what the
    model itself declares, else ``DEFAULT_MAX_LEN``. A table the model gathers keeps its rows
    (``None``: ``build_found`` takes them) and MPT's bias its constant length; otherwise the
    positions' values are followed back through ops that only select or reshape them
    (``_SELECTING``, ``Concat``) to a ``Range`` of constant start, limit and delta, or a constant
    tensor: the largest position there, plus 1, is the bound. Any other maker (an input, an
    ``Add`` of a cache length, a ``CumSum``) declares nothing."""
    import numpy as np

    first = found[0]
    if first.family == "t5-bias":
        return t5_max_len(found)
    if "table" in first.params:
        rows = first.params["table"].shape[0]
        return None, (f"the rows of the model's table {first.params['table_name']!r} ({rows})"
                      if len(found) == 1 else "the rows of each table the model gathers")
    if "length" in first.params:
        return first.params["length"], (f"the length of the model's ALiBi bias "
                                        f"{first.params['table_name']!r}")
    graph = model.graph
    makers, _ = graph_index(graph)
    consts = _constants(graph)
    bounds, sources = [], []
    for one in found:
        todo, seen, ok = [one.positions], set(), bool(one.positions)
        while todo and ok and len(seen) < 64:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            value = consts.get(name)
            node = makers.get(name)
            if value is not None and np.asarray(value).size and np.issubdtype(
                    np.asarray(value).dtype, np.integer):
                bounds.append(int(np.asarray(value).max()) + 1)
                sources.append(f"the constant positions {name!r}")
            elif node is not None and op(node) == "Range":
                start, limit, delta = (consts.get(i) for i in node.input)
                if any(v is None or np.asarray(v).size != 1 for v in (start, limit, delta)):
                    ok = False
                    continue
                start, limit, delta = (int(np.asarray(v).ravel()[0])
                                       for v in (start, limit, delta))
                count = max(0, -(-(limit - start) // delta)) if delta else 0
                if count:
                    bounds.append(max(start, start + delta * (count - 1)) + 1)
                    sources.append(f"the bound of Range {node.output[0]!r} ({start} to {limit})")
            elif node is not None and op(node) in _SELECTING:
                todo.append(node.input[0])
            elif node is not None and op(node) == "Concat":
                todo += [i for i in node.input if i]
            else:
                ok = False
        if not ok or todo or not bounds:
            return DEFAULT_MAX_LEN, (f"graft's default {DEFAULT_MAX_LEN}: the model declares no "
                                     "length (give --max-len, or --from-hf-config config.json "
                                     "for its max_position_embeddings)")
    return max(bounds), sources[bounds.index(max(bounds))]


def _data_path(out: Path) -> Path:
    return out.with_name(out.name + ".data")


def data_name(out: Path, digest: str) -> str:
    """The name of ``out``'s external data file holding bytes of sha256 ``digest``: a new name
    for new bytes, so the pair on disk is always the old one or the new one (``write_model``)."""
    return f"{out.name}.{digest[:16]}.data"


def _ours(out: Path) -> list[Path]:
    """The external data files an earlier ``write_model`` of ``out`` left (``data_name``)."""
    shape = re.compile(re.escape(out.name) + r"\.[0-9a-f]{16}\.data")
    return [p for p in out.parent.glob(f"{glob.escape(out.name)}.*.data")
            if shape.fullmatch(p.name)]


def write_model(model, out: Path, external: bool, inputs: Sequence[Path] = (),
                force: bool = True) -> None:
    """``out``, committed as one unit with its external data (issue 41): under ``out``'s lock
    (``commit.target_lock``: a second graft of ``out`` meanwhile is refused, exit 2), the output
    rule checked again (``check_output``: never one of ``inputs``, an existing ``out`` only with
    ``force``). ``external``: the tensors of 1 kB and more go to ``OUT.<16 hex of their sha256>
    .data`` beside it (``data_name``), written and renamed into place first; then ``out`` is
    renamed over the old one, the one step that switches pairs; then the data files of the
    previous pair (``_ours``; never an input) are removed. A kill or Ctrl-C at any point leaves
    the old pair or the new one, each whole (at worst with an unreferenced data file or a
    temporary one, which the next graft of ``out`` removes); an unrelated ``OUT.data`` is not
    graft's and is left alone. No data file when no tensor is that large."""
    import onnx

    out = Path(out)
    with target_lock(out, who="graft"):
        check_output(out, list(inputs), force)
        name = None
        if external:
            copy = onnx.ModelProto.FromString(model.SerializeToString())
            from onnx.external_data_helper import (
                convert_model_to_external_data,
                write_external_data_tensors,
            )

            pending = f"{temp_prefix(out)}{secrets.token_hex(4)}.data"  # removed by _settle
            convert_model_to_external_data(copy, all_tensors_to_one_file=True,
                                           location=pending, size_threshold=1024)
            try:
                write_external_data_tensors(copy, str(out.parent))
                staged = out.parent / pending
                if staged.exists():
                    digest = hashlib.sha256()
                    with open(staged, "rb+") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            digest.update(block)
                        os.fsync(f.fileno())
                    name = data_name(out, digest.hexdigest())
                    check_output(out.parent / name, list(inputs), True)
                    staged.chmod(0o666 & ~_umask())
                    for tensor in _external_tensors(copy):
                        for entry in tensor.external_data:
                            if entry.key == "location":
                                entry.value = name
                    os.replace(staged, out.parent / name)
            except OSError as exc:
                (out.parent / pending).unlink(missing_ok=True)
                raise cannot_write(out, exc) from None
            body = copy.SerializeToString()
        else:
            body = model.SerializeToString()
        tmp = write_temp(out, lambda f: f.write(body))[0]
        try:
            os.replace(tmp, out)  # the commit: the new pair from here
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise cannot_write(out, exc) from None
        for old in _ours(out):
            if old.name != name and not any(_same(old, Path(p)) for p in inputs):
                old.unlink(missing_ok=True)


def _external_tensors(model):
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


__all__ = ["DEFAULT_MAX_LEN", "DETECTABLE", "MODEL_BYTES_LIMIT", "METADATA_KEY", "PREFIX",
           "Candidate", "Found", "GraftReport", "Grafted", "OutputCheck", "Positions",
           "build_detected", "build_found", "declared_max_len", "detect", "find_pe", "graft",
           "graft_found", "graft_model", "load_model", "load_pe", "parse_model", "pe_tolerance",
           "prove", "prove_found", "reconcile", "splice_found", "table_pe", "write_model"]
