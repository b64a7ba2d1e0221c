"""Find the PE modules of a transformers model by what they hold and how they are called.

Every module of ``model.named_modules()`` is classified by its attributes, not its name:

- ``rotary``: a module whose ``forward`` takes ``position_ids`` and which holds an ``inv_freq``
  buffer (or Gemma3's ``{layer_type}_inv_freq`` per layer type) and an ``attention_scaling``
  (``{layer_type}_attention_scaling``): every Hugging Face rotary class (Llama, Mistral, Qwen2/3,
  Phi, Phi-3 longrope, Gemma3's per-layer-type sets, GPT-NeoX's partial rotation). Replaced.
  Multimodal RoPE (a ``mrope_section``: Qwen2-VL, Qwen2.5-VL and kin, three position streams)
  is a rotary module too, replaced when it has a ``recomposition_frequencies`` method (the
  selection of stream columns ``edgepe.patch.build`` reads off it; issue 42). Refused:
  ``rope_type`` ``dynamic`` (its frequencies are recomputed from the batch's longest position:
  no fixed table or slice plan reproduces every batch), an mrope module without that method or
  with longrope's two sets.
- ``learned``: an ``nn.Embedding`` (or subclass: OPT's with ``offset`` 2) other than the input
  embeddings whose row count is the config's position range (``max_position_embeddings`` or
  ``n_positions``, plus ``offset``): a gather of a trained table, already trig-free. Kept.
- ``sinusoidal``: a module holding a ``weights`` table and a ``make_weights`` method (XGLM,
  M2M100: the table is built once and gathered), an ``nn.Embedding`` whose table is fixed
  sinusoidal (Marian's, built by its ``create_weight``), or a module called with
  ``position_ids`` that holds a float buffer of one row per position (GPT-J's ``[sin | cos]``
  ``embed_positions``): a gather at run time. Kept (XGLM's ``forward`` rebuilds its table with
  sin/cos only past its rows, a branch a static export does not take).
- ``alibi``: a module with a ``build_alibi_tensor`` / ``build_mpt_alibi_tensor`` method (Bloom,
  MPT): ALiBi is computed in the model's forward from ``arange``, ``pow`` and the mask's
  ``cumsum``, no trig and no module to swap. Kept, said so.
- ``axial``: a vision tower's 2D rotary (``rope_type`` ``axial``: Qwen2-VL's
  ``Qwen2VLVisionRotaryEmbedding``, ``position_ids [N, 2]``). Kept and said so: it runs only
  with ``pixel_values``, so a text-only export of the patched model holds no trace of it; its
  Sin/Cos stay in a vision tower's export (not yet replaced).
- ``t5-bias``: T5's relative bias, an attention module with ``has_relative_attention_bias``, a
  ``relative_attention_bias`` ``nn.Embedding``, ``relative_attention_num_buckets`` /
  ``relative_attention_max_distance`` and a ``compute_bias(query_length, key_length, device,
  past_seen_tokens)`` (T5, mT5, UMT5, Switch, Pop2Piano, UDOP, Pix2Struct's text side): its
  ``compute_bias`` (float32 ``log`` buckets) is shadowed by an integer-lookup module. Refused:
  one whose ``compute_bias`` takes another form (LongT5's local blocks), naming the class.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from edgepe.contract.errors import BadParameterError

KINDS = ("rotary", "learned", "sinusoidal", "alibi", "t5-bias", "axial")


@dataclass
class Found:
    """One PE module: ``name`` in ``named_modules``, ``kind`` (``KINDS``), its layer types
    (rotary: ``None`` for a single set) and their ``rope_type``s."""

    name: str
    module: object
    kind: str
    layer_types: tuple = (None,)
    rope_types: dict = field(default_factory=dict)
    table: tuple = ()  # a kept table's shape
    mrope: tuple = ()  # a multimodal rotary module's mrope_section

    @property
    def cls(self) -> str:
        return type(self.module).__name__


class Refused(BadParameterError):
    """A PE module edgepe cannot reproduce (its class named), or a model with none it knows."""


def _takes_positions(module) -> bool:
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin forward
        return False
    return "position_ids" in params


def _rotary_layer_types(module) -> tuple | None:
    """``(None,)`` for one ``inv_freq`` set, Gemma3's layer types for per-type sets, ``None``
    when the module holds no rotary frequencies."""
    buffers = dict(module.named_buffers(recurse=False))
    if "inv_freq" in buffers and hasattr(module, "attention_scaling"):
        return (None,)
    types = tuple(sorted(
        n[: -len("_inv_freq")] for n in buffers
        if n.endswith("_inv_freq") and not n.endswith("original_inv_freq")
        and not n.endswith("long_inv_freq")
        and hasattr(module, n[: -len("_inv_freq")] + "_attention_scaling")))
    return types or None


def _t5_compute_bias(module) -> bool:
    """Whether ``module`` computes its bias as T5's ``compute_bias`` does (module docstring)."""
    try:
        params = inspect.signature(module.compute_bias).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return {"query_length", "key_length", "past_seen_tokens"} <= set(params) and all(
        isinstance(getattr(module, a, None), int) for a in (
            "relative_attention_num_buckets", "relative_attention_max_distance"))


def _position_rows(config) -> set[int]:
    rows = set()
    for attr in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            rows.add(value)
    return rows


def _position_table(module, rows: set[int]):
    """A float buffer of ``module`` with one row per position (GPT-J's ``[sin | cos]``
    ``embed_positions``, gathered by ``position_ids``), or ``None``."""
    for buffer in module.buffers(recurse=False):
        if buffer.is_floating_point() and buffer.dim() == 2 and buffer.shape[0] in rows:
            return buffer
    return None


def find(model) -> list[Found]:
    """Every PE module of ``model`` (module docstring), in ``named_modules`` order; raises
    ``Refused`` for one it knows it cannot reproduce, and when it finds none."""
    from torch import nn

    config = getattr(model, "config", None)
    rows = _position_rows(config) if config is not None else set()
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    found: list[Found] = []
    for name, module in model.named_modules():
        cls = type(module).__name__
        if getattr(module, "has_relative_attention_bias", False) and isinstance(
                getattr(module, "relative_attention_bias", None), nn.Embedding):
            if not _t5_compute_bias(module):
                raise Refused(f"cannot patch {cls} ({name}): its relative attention bias is not "
                              "T5's compute_bias(query_length, key_length, device, "
                              "past_seen_tokens) with relative_attention_num_buckets and "
                              "relative_attention_max_distance")
            found.append(Found(name, module, "t5-bias",
                               table=tuple(module.relative_attention_bias.weight.shape)))
            continue
        types = _rotary_layer_types(module)
        if types == (None,) and _takes_positions(module) and getattr(
                module, "rope_type", None) == "axial":
            found.append(Found(name, module, "axial", rope_types={None: "axial"}))
            continue
        if types is not None and _takes_positions(module):
            mrope = ()
            if hasattr(module, "mrope_section"):
                mrope = tuple(int(v) for v in module.mrope_section)
                if types != (None,) or not callable(
                        getattr(module, "recomposition_frequencies", None)) or str(
                        getattr(module, "rope_type", "")) == "longrope":
                    raise Refused(f"cannot patch {cls} ({name}): mrope (mrope_section "
                                  f"{list(mrope)}) without one frequency set and a "
                                  "recomposition_frequencies method edgepe can read")
            kinds = module.rope_type if isinstance(getattr(module, "rope_type", None), dict) \
                else {t: getattr(module, "rope_type", "default") for t in types}
            for layer_type, rope_type in kinds.items():
                if "dynamic" in str(rope_type):
                    where = f" for layer type {layer_type}" if layer_type else ""
                    raise Refused(
                        f"cannot patch {cls} ({name}): rope_type {rope_type!r}{where} "
                        "recomputes its frequencies from each batch's longest position; edgepe "
                        "patch reproduces fixed frequencies only (default, linear, llama3, "
                        "yarn, longrope)")
            found.append(Found(name, module, "rotary", types, dict(kinds), mrope=mrope))
        elif types is None and _takes_positions(module) and (
                table := _position_table(module, rows)) is not None:
            found.append(Found(name, module, "sinusoidal", table=tuple(table.shape)))
        elif any(callable(getattr(module, m, None))
                 for m in ("build_alibi_tensor", "build_mpt_alibi_tensor")):
            found.append(Found(name, module, "alibi"))
        elif hasattr(module, "make_weights") and isinstance(
                getattr(module, "weights", None), __import__("torch").Tensor):
            found.append(Found(name, module, "sinusoidal", table=tuple(module.weights.shape)))
        elif isinstance(module, nn.Embedding) and module is not inputs:
            offset = int(getattr(module, "offset", 0) or 0)
            if module.num_embeddings - offset in rows:
                sinusoidal = callable(getattr(module, "create_weight", None))
                found.append(Found(name, module, "sinusoidal" if sinusoidal else "learned",
                                   table=tuple(module.weight.shape)))
    if not found:
        raise Refused(f"cannot patch {type(model).__name__}: no PE module edgepe knows (rotary "
                      "embeddings, learned or sinusoidal position tables, ALiBi, T5's relative "
                      "bias)")
    return found
