"""A Hugging Face ``config.json`` translated into an edgepe scheme and its parameters.

``from_hf_config(config)`` is pure (no torch, no file access): it takes the parsed JSON object
and returns ``HFTranslation(scheme, params, max_len, d_model, heads, notes)``, the arguments of
``edgepe.schemes.resolve``, plus one-line notes on what was read and what was assumed.
``read_hf_config(path)`` reads the file for it: at most ``CONFIG_BYTES_LIMIT`` bytes, JSON only,
an object at the top. Every problem is a ``BadParameterError`` naming the key and what it holds
(the CLI's exit 2, one line).

What a family's config becomes (transformers 5 keys, and the 4.x names they replaced):

- RoPE (Llama, Mistral, Mixtral, Qwen2/3, Gemma, Phi, Phi-3, GPT-NeoX, GPT-J, StableLM, ...):
  ``rope`` with ``d_model`` = ``head_dim`` (or ``hidden_size / num_attention_heads``;
  GPT-J ``n_embd / n_head``), ``base`` = ``rope_theta`` (in ``rope_parameters`` or at the top;
  GPT-NeoX's ``rotary_emb_base``), ``rotary_dim`` from ``partial_rotary_factor`` (GPT-NeoX's
  ``rotary_pct``, default 0.25; Phi's default 0.5) or GPT-J's ``rotary_dim``, ``layout`` half
  (``rotate_half``) except GPT-J/CodeGen (interleaved), the scaling of ``rope_parameters`` /
  ``rope_scaling`` (``rope_type`` or 4.x ``type``: default, linear, dynamic, llama3, yarn,
  longrope), ``max_len`` = ``max_position_embeddings`` (GPT-J ``n_positions``), and
  ``freq_dtype=float32``: the frequencies transformers computes.
- ALiBi (BLOOM, MPT with ``attn_config.alibi``; Falcon with ``alibi`` is refused: its bias is
  rounded to bfloat16): ``alibi`` with
  ``heads`` = ``n_head``/``n_heads``/``num_attention_heads``; ``max_len`` = ``max_seq_len``
  (MPT) or none (BLOOM: give ``--max-len``).
- Learned absolute (GPT-2, GPT-Neo, OPT, BERT-like): ``learned`` with ``d_model`` = the width and
  ``max_len`` = ``n_positions``/``max_position_embeddings``; OPT's table has 2 leading rows that
  are no position: ``offset=2`` (``--checkpoint-param`` skips them).
- Sinusoidal: Marian (``layout=half``; transformers builds its table in float64 numpy, so
  ``freq_dtype=float64``), XGLM and M2M100 (``layout=half``, ``frequencies=fairseq``, ``offset``
  2 for XGLM, ``pad_token_id + 1`` for M2M100, ``freq_dtype=float32``), ``d_model``,
  ``max_len`` = ``max_position_embeddings``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from edgepe.contract.errors import BadParameterError

CONFIG_BYTES_LIMIT = 1 << 20  # config.json files are a few KiB; a bigger file is not one



class RopeFamily(NamedTuple):
    """What a RoPE family's transformers 5.24 module computes (issue 40), read from its
    ``modeling_*.py``: ``layout`` of the pairs its rotation turns, ``partial`` the default
    ``partial_rotary_factor`` of a rotary init that reads one (its config class's default), or
    ``None`` where the init (``compute_default_rope_parameters``) ignores it and the rotation
    covers all of ``head_dim``; ``how`` the code followed, for the notes."""
    layout: str
    partial: float | None
    how: str


_HALF = "rotate_half on (i, i + R/2)"
# Every RoPE model_type the translation accepts; tests/test_hf_config_vs_transformers.py builds
# each family's own rotary module and rotation and compares the artifacts with them.
ROPE_FAMILIES = {
    **{name: RopeFamily("half", None, _HALF) for name in (
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
        "gemma2", "starcoder2", "olmo", "olmo2", "falcon", "granite")},
    "phi": RopeFamily("half", 0.5, _HALF + ", the first int(head_dim x factor)"),
    "phi3": RopeFamily("half", 1.0, _HALF + ", the first int(head_dim x factor)"),
    "gpt_neox": RopeFamily("half", 0.25, _HALF + ", the first int(head_dim x rotary_pct)"),
    "stablelm": RopeFamily("half", 0.25, _HALF + ", the first int(head_dim x factor)"),
    "persimmon": RopeFamily("half", 0.5, _HALF + ", the first int(head_dim x factor)"),
    "glm": RopeFamily("interleaved", 0.5, "even/odd rotate_half with repeat_interleave'd "
                      "cos/sin on (2i, 2i+1), the first int(head_dim x factor)"),
    "cohere": RopeFamily("interleaved", None, "cos/sin by repeat_interleave, even/odd "
                         "rotate_half on (2i, 2i+1)"),
    "deepseek_v2": RopeFamily("interleaved", None, "complex products of (2i, 2i+1) "
                              "(view_as_complex), qk_rope_head_dim wide"),
    # rope_interleave false: apply_rotary_pos_emb (half); true, its default: see _rope
    "deepseek_v3": RopeFamily("interleaved", None, "apply_rotary_pos_emb_interleave on "
                              "(2i, 2i+1), qk_rope_head_dim wide"),
    "llama4_text": RopeFamily("interleaved", None, "complex products of (2i, 2i+1) "
                              "(view_as_complex)"),
    "gptj": RopeFamily("interleaved", None, "rotate_every_two on (2i, 2i+1) of its "
                       "rotary_dim, base 10000"),
    "codegen": RopeFamily("interleaved", None, "rotate_every_two on (2i, 2i+1) of its "
                          "rotary_dim, base 10000"),
}
INTERLEAVED_ROPE = tuple(k for k, v in ROPE_FAMILIES.items() if v.layout == "interleaved")
ROPE_MODELS = tuple(ROPE_FAMILIES)
ALIBI_MODELS = ("bloom", "mpt")
# The position table's name in each family's checkpoint (task model first, then the bare
# model's): what --from-hf-config takes when --checkpoint-param is not given.
LEARNED_TENSORS = {
    "gpt2": ("transformer.wpe.weight", "wpe.weight"),
    "gpt_neo": ("transformer.wpe.weight", "wpe.weight"),
    "gpt_bigcode": ("transformer.wpe.weight", "wpe.weight"),
    "opt": ("model.decoder.embed_positions.weight", "decoder.embed_positions.weight"),
    "biogpt": ("biogpt.embed_positions.weight", "embed_positions.weight"),
    "bert": ("bert.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
    "roberta": ("roberta.embeddings.position_embeddings.weight",
                "embeddings.position_embeddings.weight"),
    "xlm-roberta": ("roberta.embeddings.position_embeddings.weight",
                    "embeddings.position_embeddings.weight"),
    "distilbert": ("distilbert.embeddings.position_embeddings.weight",
                   "embeddings.position_embeddings.weight"),
    "electra": ("electra.embeddings.position_embeddings.weight",
                "embeddings.position_embeddings.weight"),
}
LEARNED_MODELS = tuple(LEARNED_TENSORS)
SINUSOIDAL_MODELS = ("marian", "xglm", "m2m_100", "m2m100")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")
# Where partial rotary has a model default when the config omits it (transformers' configs).
PARTIAL_DEFAULTS = {k: v.partial for k, v in ROPE_FAMILIES.items() if v.partial not in (None, 1)}


class HFTranslation(NamedTuple):
    scheme: str
    params: dict[str, Any]
    max_len: int | None
    d_model: int | None
    heads: int | None
    notes: tuple[str, ...]
    # the model_type whose transformers code the translation followed (None: no model_type)
    model_type: str | None = None


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path``: at most ``CONFIG_BYTES_LIMIT`` bytes, an object at the top."""
    path = Path(path)
    where = f"--from-hf-config {str(path)!r}"
    if not path.is_file():
        raise BadParameterError(f"{where} does not exist or is not a file")
    with open(path, "rb") as f:
        raw = f.read(CONFIG_BYTES_LIMIT + 1)
    if len(raw) > CONFIG_BYTES_LIMIT:
        raise BadParameterError(f"{where} is larger than {CONFIG_BYTES_LIMIT} bytes: not a "
                                "config.json")
    try:
        loaded = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadParameterError(f"{where} is not JSON: {first}") from None
    except RecursionError:
        raise BadParameterError(f"{where} nests too deeply to be a config.json") from None
    if not isinstance(loaded, dict):
        raise BadParameterError(f"{where} holds a JSON {type(loaded).__name__}, not an object")
    return loaded


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


class _Reader:
    """Typed access to the config's keys; a wrong type names the key and its value."""

    def __init__(self, config: Mapping[str, Any], where: str = "") -> None:
        self.config, self.where = config, where

    def _bad(self, key: str, value: Any, want: str) -> BadParameterError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return BadParameterError(f"HF config: {self.where}{key} must be {want}, got {shown}")

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def int(self, *keys: str, low: int = 1) -> int | None:
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise self._bad(key, value, f"an integer >= {low}")
            return value
        return None

    def float(self, key: str, positive: bool = False) -> float | None:
        value = self.config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value) or (positive and value <= 0):
            raise self._bad(key, value, "a positive finite number" if positive
                            else "a finite number")
        return float(value)

    def str(self, key: str) -> str | None:
        value = self.config.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(key, value, "a string")
        return value

    def bool(self, key: str) -> bool | None:
        value = self.config.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def mapping(self, key: str) -> _Reader | None:
        value = self.config.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self._bad(key, value, "an object")
        return _Reader(value, f"{self.where}{key}.")

    def floats(self, key: str) -> tuple[float, ...] | None:
        value = self.config.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not value or not all(
                not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
                and v > 0 for v in value):
            raise self._bad(key, value, "a list of positive numbers")
        return tuple(float(v) for v in value)


def from_hf_config(config: Mapping[str, Any]) -> HFTranslation:
    """The edgepe scheme of a Hugging Face model config (module docstring)."""
    if not isinstance(config, Mapping):
        raise BadParameterError(f"HF config must be a JSON object, got {type(config).__name__}")
    c = _Reader(config)
    model_type = (c.str("model_type") or "").lower()
    rope = c.mapping("rope_parameters") or c.mapping("rope_scaling")
    if model_type in ("t5", "qwen2_vl"):  # issue 40: T5's bucketed bias, Qwen2-VL's mrope
        return _t5_or_qwen2_vl(c, model_type)
    if model_type in ALIBI_MODELS or (model_type == "falcon" and c.bool("alibi")):
        return _alibi(c, model_type)
    if model_type in LEARNED_MODELS:
        return _learned(c, model_type)
    if model_type in SINUSOIDAL_MODELS:
        return _sinusoidal(c, model_type)
    if model_type in ROPE_FAMILIES or not model_type and (
            rope is not None or c.has("rope_theta") or c.has("rotary_dim")
            or c.has("rotary_pct") or c.has("partial_rotary_factor")):
        return _rope(c, model_type)
    if rope is not None:
        _one_rope_set(rope)
    if model_type:
        # A RoPE family is accepted only where its transformers module was read and is tested
        # (issue 40): another family's pairs, partial width or scaling may differ.
        raise BadParameterError(
            f"HF config: model_type {model_type!r} is not one edgepe translates (RoPE: "
            f"{', '.join(ROPE_FAMILIES)}; alibi: bloom, mpt; learned: "
            f"{', '.join(LEARNED_MODELS)}; sinusoidal: marian, xglm, m2m_100; t5-bias: t5; "
            "mrope: qwen2_vl)")
    raise BadParameterError("HF config has no model_type and no rope_theta/rope_parameters: "
                            "not a transformers model config")


def _t5_or_qwen2_vl(c: _Reader, model_type: str) -> HFTranslation:
    """T5: ``t5-bias`` with ``relative_attention_num_buckets``, ``relative_attention_max_distance``,
    ``num_heads``; ``is_decoder`` (a decoder stack's config) picks ``direction=causal``, else the
    encoder's bidirectional buckets. Qwen2-VL: ``mrope`` with ``rope_parameters`` (4.x
    ``rope_scaling``) ``mrope_section`` and ``rope_theta``, ``head_dim`` (or ``hidden_size /
    num_attention_heads``), from ``text_config`` where the config has one (transformers 5)."""
    if model_type == "t5":
        decoder = bool(c.bool("is_decoder"))
        params = {"num_buckets": c.int("relative_attention_num_buckets") or 32,
                  "max_distance": c.int("relative_attention_max_distance") or 128,
                  "direction": "causal" if decoder else "bidirectional"}
        notes = [f"{'decoder (is_decoder)' if decoder else 'encoder'} buckets"
                 + ("" if decoder else "; the decoder's self-attention: --param direction=causal"),
                 "T5's embedding: --checkpoint FILE --checkpoint-param "
                 f"{'decoder' if decoder else 'encoder'}.block.0.layer.0.SelfAttention."
                 "relative_attention_bias.weight"]
        return HFTranslation("t5-bias", params, c.int("n_positions"), None,
                             c.int("num_heads") or 8, tuple(notes))
    text = c.mapping("text_config") or c
    rope = (text.mapping("rope_parameters") or text.mapping("rope_scaling")
            or c.mapping("rope_parameters") or c.mapping("rope_scaling") or _Reader({}))
    kind = rope.str("rope_type") or rope.str("type") or "default"
    if kind not in ("default", "mrope"):
        raise BadParameterError(f"HF config: qwen2_vl rope_type {kind!r}: edgepe's mrope has the "
                                "default frequencies only")
    section = rope.config.get("mrope_section", [16, 24, 24])  # transformers' default
    if not isinstance(section, list) or not section or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in section):
        raise rope._bad("mrope_section", section, "a list of positive integers")
    heads = text.int("num_attention_heads")
    hidden = text.int("hidden_size")
    head_dim = text.int("head_dim") or (hidden // heads if hidden and heads else None)
    if head_dim is None:
        raise BadParameterError("HF config: qwen2_vl names no head_dim and no hidden_size / "
                                "num_attention_heads")
    if 2 * sum(section) != head_dim:
        raise BadParameterError(f"HF config: mrope_section {section} covers {2 * sum(section)} "
                                f"dimensions, head_dim is {head_dim}")
    base = rope.float("rope_theta", positive=True) or text.float("rope_theta", positive=True)
    # transformers 5.24: Qwen2VLTextConfig fills rope_theta 1e6 where the config has none
    params = {"base": base or 1000000.0, "mrope_section": tuple(section)}
    notes = ("positions [N, 3]: temporal, height, width (a text token has all three equal)",)
    return HFTranslation("mrope", params, _max_positions(text), head_dim, None, notes)


def _max_positions(c: _Reader) -> int | None:
    return c.int("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def _width(c: _Reader) -> int | None:
    return c.int("hidden_size", "n_embd", "d_model")


def _heads(c: _Reader) -> int | None:
    return c.int("num_attention_heads", "n_head", "n_heads", "num_heads")


def _one_rope_set(r: _Reader) -> None:
    nested = sorted(k for k, v in r.config.items() if isinstance(v, Mapping))
    if nested:  # Gemma 3 style: one set of rope parameters per attention layer type
        raise BadParameterError(
            f"HF config: {r.where[:-1]} holds one set per layer type ({', '.join(nested)}); "
            "edgepe exports one: give its values with --scheme rope and --param")


def _rope_width(c: _Reader, model_type: str) -> int:
    """The width transformers' rotary init takes as ``head_dim``."""
    if model_type in ("deepseek_v2", "deepseek_v3"):
        # the config class sets head_dim = qk_rope_head_dim (its default 64): the rotated part
        return c.int("qk_rope_head_dim") or 64
    head_dim = c.int("head_dim")
    if head_dim is None:
        width, heads = _width(c), _heads(c)
        if width is None or heads is None:
            raise BadParameterError("HF config: no head_dim, and no hidden_size and "
                                    "num_attention_heads to derive it from")
        if width % heads:
            raise BadParameterError(f"HF config: hidden_size {width} is not a multiple of "
                                    f"num_attention_heads {heads}")
        head_dim = width // heads
    return head_dim


def _rope(c: _Reader, model_type: str) -> HFTranslation:
    notes = []
    r = c.mapping("rope_parameters") or c.mapping("rope_scaling") or _Reader({})
    _one_rope_set(r)
    family = ROPE_FAMILIES.get(model_type, RopeFamily("half", 1.0, _HALF))
    head_dim = _rope_width(c, model_type)
    base = r.float("rope_theta", positive=True) or c.float("rope_theta", positive=True) or \
        c.float("rotary_emb_base", positive=True) or 10000.0
    if model_type in ("gptj", "codegen"):
        base = 10000.0  # create_sinusoidal_positions: 10000 whatever the config says
    params: dict[str, Any] = {"base": base, "freq_dtype": "float32"}
    layout = family.layout
    if model_type == "deepseek_v3":
        if c.bool("rope_interleave") is False:
            layout, how = "half", "apply_rotary_pos_emb (rope_interleave false)"
        else:
            how = (family.how + "; it writes the rotated pairs de-interleaved ([evens | odds]), "
                   "the same permutation of q and k, which leaves q.k unchanged")
    else:
        how = family.how
    params["layout"] = layout
    kind = r.str("rope_type") or r.str("type") or "default"
    # partial rotary: GPT-J's rotary_dim; else a factor (rope_parameters first, as transformers 5
    # standardises it there), with the model's default where its config class has one.
    rotary = None
    factor_key = next((k for k in ("partial_rotary_factor", "rotary_pct")
                       if r.has(k) or c.has(k)), None)
    partial = (r.float(factor_key, positive=True) or c.float(factor_key, positive=True)
               if factor_key else None)
    if model_type in ("gptj", "codegen"):
        rotary = c.int("rotary_dim")
        if rotary is None:
            width = _width(c)
            if width != head_dim:  # its table is then hidden_size wide: the model fails
                raise BadParameterError(
                    f"HF config: {model_type} without rotary_dim builds its sin/cos table over "
                    f"n_embd {width}, wider than a head ({head_dim}): set rotary_dim")
    elif family.partial is None and model_type:
        if partial is not None and partial != 1:
            if kind != "default":
                # the scaled inits read the factor, the rotation covers head_dim: transformers
                # fails on the shapes, so there is nothing to reproduce
                raise BadParameterError(
                    f"HF config: {factor_key} {partial:g} with rope_type {kind}: transformers' "
                    f"{model_type} rotates all of head_dim {head_dim} but its {kind} frequencies "
                    f"cover int({head_dim} x {partial:g}); the model does not run")
            notes.append(f"{model_type} ignores {factor_key} {partial:g} "
                         "(compute_default_rope_parameters reads head_dim only): all "
                         f"{head_dim} dimensions rotate")
    else:
        if partial is None:
            partial = family.partial
            if partial not in (None, 1):
                notes.append(f"partial_rotary_factor {partial} ({model_type}'s default)")
        if partial is not None:
            if partial > 1:
                raise BadParameterError(f"HF config: {factor_key} must be at most 1, got "
                                        f"{partial}")
            rotary = int(head_dim * partial)  # transformers: int(head_dim * factor)
            if rotary == 0 or rotary % 2:
                raise BadParameterError(
                    f"HF config: {factor_key or 'partial_rotary_factor'} {partial:g} gives a "
                    f"rotary width of int({head_dim} x {partial:g}) = {rotary}; transformers "
                    "needs it even and above 0 (0 would rotate nothing)")
    if rotary is not None and rotary != head_dim:
        if rotary % 2 or rotary > head_dim:
            raise BadParameterError(f"HF config: the rotary width {rotary} must be even and at "
                                    f"most head_dim {head_dim}")
        params["rotary_dim"] = rotary
    max_len = _max_positions(c)
    if kind not in ROPE_TYPES:
        raise BadParameterError(f"HF config: rope_type {kind!r} is not one edgepe computes "
                                f"({', '.join(ROPE_TYPES)})")
    params["rope_type"] = kind
    if kind != "default":
        original = r.int("original_max_position_embeddings") or c.int(
            "original_max_position_embeddings")
        if kind == "dynamic":
            # transformers' dynamic NTK takes max_position_embeddings as the trained context
            original = max_len
        if original is None:
            original = max_len
        if original is None:
            raise BadParameterError(f"HF config: rope_type {kind} needs "
                                    "original_max_position_embeddings or max_position_embeddings")
        params["original_max_position_embeddings"] = original
        factor = r.float("factor", positive=True)
        if factor is None and kind in ("yarn", "longrope") and max_len is not None:
            factor = max_len / original  # transformers: max_position_embeddings / original
            if kind == "yarn" and factor < 1:
                raise BadParameterError(
                    f"HF config: yarn factor max_position_embeddings / "
                    f"original_max_position_embeddings = {max_len} / {original} = {factor:g}, "
                    "below 1 (yarn would then extend nothing): give rope_parameters.factor")
        if factor is None and kind in ("linear", "dynamic", "llama3"):
            raise BadParameterError(f"HF config: rope_type {kind} needs a factor")
        if factor is not None and (kind != "longrope" or factor >= 1):
            params["factor"] = factor
        for key in ("low_freq_factor", "high_freq_factor"):
            if kind == "llama3":
                value = r.float(key, positive=True)
                if value is None:
                    raise BadParameterError(f"HF config: rope_type llama3 needs {key}")
                params[key] = value
        if kind == "yarn":
            for key in ("beta_fast", "beta_slow"):
                if (value := r.float(key, positive=True)) is not None:
                    params[key] = value
            if r.bool("truncate") is False:
                raise BadParameterError("HF config: yarn with truncate false is not computed by "
                                        "edgepe (its correction range is rounded, as default)")
            attention = r.float("attention_factor", positive=True)
            mscale, mscale_all = r.float("mscale"), r.float("mscale_all_dim")
            if attention is None and mscale and mscale_all and factor and factor > 1:
                def get_mscale(scale: float, m: float) -> float:
                    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

                below = get_mscale(factor, mscale_all)
                if not below > 0 or not math.isfinite(below):  # (issue 41: ZeroDivisionError)
                    raise BadParameterError(
                        f"HF config: yarn mscale_all_dim {mscale_all!r} with factor {factor!r} "
                        f"makes the attention factor's divisor {below!r}; it must be positive")
                attention = float(get_mscale(factor, mscale) / below)
                notes.append(f"yarn attention factor {attention!r} from mscale/mscale_all_dim")
            if attention is not None:
                params["attention_factor"] = attention
        if kind == "longrope":
            pairs = (rotary or head_dim) // 2
            for key in ("short_factor", "long_factor"):
                value = r.floats(key)
                if value is None:
                    raise BadParameterError(f"HF config: rope_type longrope needs {key}")
                if len(value) != pairs:
                    raise BadParameterError(
                        f"HF config: {r.where}{key} has {len(value)} numbers; longrope needs "
                        f"rotary_dim / 2 = {pairs} (one per rotated pair)")
                params[key] = value
            attention = r.float("attention_factor", positive=True)
            if attention is None:  # _compute_longrope_parameters, from the factor or the ratio
                attention = 1.0 if factor is None or factor <= 1.0 else math.sqrt(
                    1 + math.log(factor) / math.log(original))
                notes.append(f"longrope attention factor {attention!r} (from factor "
                             f"{factor if factor is not None else 1.0:g})")
            params["attention_factor"] = attention
        if kind == "dynamic":
            notes.append("dynamic: up to max_position_embeddings it is the default RoPE; "
                         "past it the model switches with its running length "
                         "(check_dynamic_ntk)")
        if kind == "longrope":
            notes.append(f"{kind}: frequencies for a sequence of max_len positions (seq_len; "
                         "the model switches them with its running length)")
    notes.insert(0, f"as transformers' {model_type} computes it ({how})" if model_type else
                 f"no model_type: read as a {how} model, partial_rotary_factor as Phi's")
    return HFTranslation("rope", params, max_len, head_dim, None, tuple(notes),
                         model_type or None)


def _alibi(c: _Reader, model_type: str) -> HFTranslation:
    heads = _heads(c)
    notes: list[str] = []
    max_len = c.int("max_seq_len", "max_position_embeddings", "seq_length")
    if model_type == "falcon":
        # transformers' Falcon build_alibi_tensor: slopes.bfloat16() * positions, a bfloat16
        # bias (8 significant bits: m x 257 already rounds), which edgepe's float32 bias is not
        raise BadParameterError(
            "HF config: falcon with alibi true: transformers rounds its bias (slope x position) "
            "to bfloat16, which edgepe's alibi (float32) does not reproduce; export --scheme "
            "alibi --heads H for the exact paper bias")
    if model_type == "mpt":
        attn = c.mapping("attn_config") or _Reader({})
        if attn.bool("alibi") is False:
            raise BadParameterError("HF config: this mpt model has attn_config.alibi false: "
                                    "no positional bias to export")
        bias_max = attn.float("alibi_bias_max")
        if bias_max not in (None, 8.0):
            raise BadParameterError(f"HF config: mpt alibi_bias_max {bias_max:g}: edgepe's "
                                    "slopes are the paper's (8)")
        if heads is not None and heads & (heads - 1):
            raise BadParameterError(f"HF config: mpt with {heads} heads (not a power of two) "
                                    "orders its slopes unlike the paper's rule edgepe computes")
    if heads is None:
        raise BadParameterError("HF config: no n_head/n_heads/num_attention_heads for alibi")
    return HFTranslation("alibi", {"slopes": "paper"}, max_len, None, heads, tuple(notes),
                        model_type)


def _learned(c: _Reader, model_type: str) -> HFTranslation:
    width = c.int("word_embed_proj_dim") if model_type == "opt" else None
    if model_type == "electra":  # its embeddings (positions too) are embedding_size wide
        width = c.int("embedding_size") or 128  # ElectraConfig's default
    width = c.int("hidden_size", "n_embd", "d_model", "dim") if width is None else width
    max_len = c.int("n_positions", "max_position_embeddings")
    if width is None or max_len is None:
        raise BadParameterError(f"HF config: {model_type} needs its width (hidden_size/n_embd) "
                                "and n_positions/max_position_embeddings")
    params: dict[str, Any] = {}
    notes = []
    if model_type in ("opt", "biogpt"):  # the table has max_len + 2 rows; p reads row p + 2
        width = c.int("hidden_size") or width
        params["offset"] = 2
        notes.append(f"{model_type}: its position table has 2 leading rows before position 0 "
                     "(offset 2)")
    elif model_type in ("roberta", "xlm-roberta"):
        # positions start at pad_token_id + 1, inside the max_position_embeddings rows
        pad = c.int("pad_token_id", low=0)
        offset = (1 if pad is None else pad) + 1
        if max_len <= offset:
            raise BadParameterError(f"HF config: {model_type} max_position_embeddings {max_len} "
                                    f"leaves no position after its padding offset {offset}")
        params["offset"] = offset
        max_len -= offset
        notes.append(f"{model_type}: positions start at pad_token_id + 1 (offset {offset})")
    return HFTranslation("learned", params, max_len, width, None, tuple(notes),
                        model_type)


def learned_tensor(model_type: str, names) -> str | None:
    """The position table's name among a checkpoint's ``names`` for ``model_type``, or None."""
    return next((n for n in LEARNED_TENSORS.get(str(model_type).lower(), ()) if n in names),
                None)


def _sinusoidal(c: _Reader, model_type: str) -> HFTranslation:
    width = c.int("d_model", "hidden_size")
    max_len = _max_positions(c)
    if width is None or max_len is None:
        raise BadParameterError(f"HF config: {model_type} needs d_model and "
                                "max_position_embeddings")
    params: dict[str, Any] = {"layout": "half"}
    notes = []
    if model_type == "marian":
        notes.append("marian builds its table in float64 (numpy): freq_dtype float64, "
                     "within the scheme's tolerance of it")
    else:
        params.update(frequencies="fairseq", freq_dtype="float32")
        if model_type == "xglm":
            params["offset"] = 2
        else:
            pad = c.int("pad_token_id", low=0)
            params["offset"] = (1 if pad is None else pad) + 1
    return HFTranslation("sinusoidal", params, max_len, width, None, tuple(notes),
                        model_type)


def check_dynamic_ntk(t: HFTranslation, max_len: int, remedy: str) -> None:
    """One line (``BadParameterError``) when ``t`` is dynamic NTK RoPE and ``max_len`` positions
    reach past its ``max_position_embeddings`` ``P``; nothing otherwise.

    transformers 5 (``modeling_rope_utils``): ``_compute_dynamic_ntk_parameters`` at init (and
    for any ``seq_len <= P``) computes ``base ((factor P / P) - (factor - 1))^(R / (R - 2))`` =
    ``base``: the default RoPE. ``dynamic_rope_update``'s forward takes ``seq_len =
    max(position_ids) + 1`` and, once it passes the longest length the module has cached,
    recomputes ``inv_freq``
    for it and keeps that as module state (reset only by a later call shorter than ``P``), while
    the keys already in a KV cache keep the frequencies they were rotated with. So up to ``P``
    positions a table of the default frequencies is exactly the model's RoPE; past ``P`` the
    frequencies depend on the running length and on the calls before, which no fixed table or
    stateless graph reproduces. ``remedy`` ends the line (what the command offers instead)."""
    p = t.params
    original = p.get("original_max_position_embeddings")
    if p.get("rope_type") != "dynamic" or original is None or max_len <= original:
        return
    dim = p.get("rotary_dim") or t.d_model
    factor, base = p["factor"], p["base"]
    grown = base * ((factor * max_len / original) - (factor - 1)) ** (dim / (dim - 2))
    raise BadParameterError(
        f"rope_type dynamic (NTK) is the default RoPE up to max_position_embeddings {original}; "
        f"past it transformers recomputes inv_freq from the running length (base {base:,.6g} -> "
        f"{grown:,.6g} at {max_len} positions) and keeps it as state across calls, which no "
        f"fixed table reproduces: {max_len} positions asked, at most {original} are faithful; "
        f"{remedy}")
