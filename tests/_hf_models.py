"""Tiny random-weight transformers models of each PE family, exported as a user would (issue 29).

``export(family, folder)`` builds the model from a config object in code (no download; seeded),
wraps it so the KV cache is plain tensors in and out (``past_key.i``/``past_value.i`` ->
``logits``, ``present_key.i``/``present_value.i``), and writes ``folder/model.onnx`` with
``torch.onnx.export(..., dynamo=True)`` (torch 2.13's default; it writes ``model.onnx.data``).
``torch_outputs`` runs the same model in torch on the same inputs, for the check against torch.

Also run as a script by ``scripts/hf_example.py`` (the README's example model).
"""

from __future__ import annotations

from pathlib import Path

SEED = 0
VOCAB = 64


def config(family: str):
    """The transformers config object of ``family`` (a few layers of width 32, 4 heads)."""
    import transformers as tf

    small = {"vocab_size": VOCAB}
    llama = {**small, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
    scaled = {
        "llama-linear": {"rope_type": "linear", "factor": 2.0},
        "llama-dynamic": {"rope_type": "dynamic", "factor": 2.0},
        "llama-llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "llama-yarn": {"rope_type": "yarn", "factor": 4.0,
                       "original_max_position_embeddings": 64},
    }
    if family == "llama":
        return tf.LlamaConfig(**llama)
    if family in scaled:
        return tf.LlamaConfig(**llama, rope_parameters={"rope_theta": 10000.0,
                                                        **scaled[family]})
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
    if family == "phi3-longrope":  # short/long inv_freq picked at run time by the positions
        return tf.Phi3Config(**llama, pad_token_id=0, rope_parameters={
            "rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.2, 1.3],
            "long_factor": [2.0, 2.5, 3.0, 4.0], "original_max_position_embeddings": 64})
    if family == "xglm":
        return tf.XGLMConfig(vocab_size=VOCAB, d_model=32, ffn_dim=64, num_layers=2,
                             attention_heads=4, max_position_embeddings=256)
    if family == "bloom":
        return tf.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)
    if family == "marian":  # encoder-decoder: two sinusoidal tables, [sin | cos] halves
        return tf.MarianConfig(vocab_size=VOCAB, decoder_vocab_size=VOCAB, d_model=32,
                               encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                               max_position_embeddings=256, pad_token_id=VOCAB - 1,
                               decoder_start_token_id=VOCAB - 1, eos_token_id=0)
    if family == "mpt":
        return tf.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_seq_len=256,
                            expansion_ratio=2)
    if family in FAMILIES_40:
        return _config_40(family)
    raise KeyError(family)


# Issue 40's families, exported the simplest way (``export_simple``): tiny configs of the same
# sizes (width 32, 4 heads, 2 layers; 4 for the per-layer-type RoPEs, so both kinds occur).
FAMILIES_40 = ("cohere", "bert", "roberta", "gemma3", "gemma3n", "modernbert", "t5", "qwen2_vl",
               "whisper", "falcon-alibi")
# Encoder-only families: ``AutoModel`` (no causal LM head), its first output.
ENCODERS = {"bert", "roberta", "modernbert"}


def _config_40(family: str):
    import transformers as tf

    small = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128}
    if family == "cohere":  # interleaved RoPE built by repeat_interleave
        return tf.CohereConfig(**small, num_key_value_heads=2, pad_token_id=0)
    if family == "bert":  # positions: a Slice of the registered position_ids buffer
        return tf.BertConfig(**small)
    if family == "roberta":  # positions: CumSum of the non-pad mask plus padding_idx (1)
        return tf.RobertaConfig(**small, pad_token_id=1)
    if family == "gemma3":  # a local and a global RoPE of different bases, per layer type
        return tf.Gemma3TextConfig(**{**small, "num_hidden_layers": 4}, num_key_value_heads=2,
                                   head_dim=8, sliding_window=16,
                                   layer_types=["sliding_attention", "full_attention"] * 2)
    if family == "gemma3n":
        return tf.Gemma3nTextConfig(**{**small, "num_hidden_layers": 4,
                                       "intermediate_size": [64] * 4}, num_key_value_heads=2,
                                    head_dim=8, sliding_window=16, num_kv_shared_layers=0,
                                    layer_types=["sliding_attention", "full_attention"] * 2,
                                    hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB,
                                    laurel_rank=4, altup_num_inputs=2,
                                    activation_sparsity_pattern=[0.0] * 4)
    if family == "modernbert":  # local and global RoPE of different bases, an encoder
        return tf.ModernBertConfig(**{**small, "num_hidden_layers": 3}, local_attention=8,
                                   global_attn_every_n_layers=2, pad_token_id=0)
    if family == "t5":  # relative position bias: refused by name
        return tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                           num_heads=4, relative_attention_num_buckets=8,
                           relative_attention_max_distance=16, decoder_start_token_id=0)
    if family == "qwen2_vl":  # multimodal RoPE (three position streams): graft.mrope
        return tf.Qwen2VLTextConfig(**small, num_key_value_heads=2, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]})
    if family == "whisper":  # the encoder's sinusoidal table and the decoder's learned one
        return tf.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                encoder_attention_heads=4, decoder_attention_heads=4,
                                encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                                max_source_positions=16, max_target_positions=32,
                                pad_token_id=0, decoder_start_token_id=1, eos_token_id=2,
                                bos_token_id=1)
    if family == "falcon-alibi":
        return tf.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, alibi=True, new_decoder_architecture=False,
                               multi_query=False, parallel_attn=False, bias=True)
    raise KeyError(family)


def export_simple(family: str, folder: Path, dynamo: bool = True):
    """``(folder/model.onnx, the torch module exported)``: issue 40's simplest export,
    ``torch.onnx.export(model, (input_ids,), path, dynamo=dynamo)`` with ``use_cache=False`` and
    a dynamic batch and length, so positions (or the mask ALiBi's come from) are built inside
    the graph; ``logits`` (an encoder's ``last_hidden_state``; T5's and Whisper's decoder reads
    ``input_ids`` too, the encoder's input a fixed ``[B, 8, 32]`` of features for Whisper)."""
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    cfg = config(family)
    if family in ENCODERS:
        lm = tf.AutoModel.from_config(cfg).eval()
    elif family == "t5":
        lm = tf.T5ForConditionalGeneration(cfg).eval()
    elif family == "whisper":
        lm = tf.WhisperForConditionalGeneration(cfg).eval()
    elif family == "qwen2_vl":
        lm = tf.Qwen2VLTextModel(cfg).eval()
    else:
        lm = tf.AutoModelForCausalLM.from_config(cfg).eval()

    class Simple(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            if family == "t5":
                return self.lm(input_ids=input_ids, decoder_input_ids=input_ids,
                               use_cache=False).logits
            if family == "whisper":
                features = torch.ones(input_ids.shape[0], 8, 32) * 0.5
                return self.lm(input_features=features, decoder_input_ids=input_ids,
                               use_cache=False).logits
            if family in ENCODERS or family == "qwen2_vl":
                return self.lm(input_ids=input_ids).last_hidden_state
            return self.lm(input_ids=input_ids, use_cache=False).logits

    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, VOCAB, (2, 8), generator=g)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    simple = Simple().eval()
    if dynamo:
        shapes = ({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=32)},)
        torch.onnx.export(simple, (ids,), path, dynamo=True, dynamic_shapes=shapes,
                          input_names=["input_ids"], output_names=["logits"], verbose=False)
    else:
        torch.onnx.export(simple, (ids,), str(path), dynamo=False, opset_version=18,
                          input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    return path, simple


def model(family: str):
    """The seeded random-weight causal LM of ``family``, in eval mode."""
    import torch
    import transformers as tf

    torch.manual_seed(SEED)
    if family in ENC_DEC:
        return tf.AutoModelForSeq2SeqLM.from_config(config(family)).eval()
    return tf.AutoModelForCausalLM.from_config(config(family)).eval()


def wrap(lm, with_positions: bool):
    import torch
    from transformers.cache_utils import DynamicCache

    layers = lm.config.num_hidden_layers

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, *rest):
            position_ids, past = (rest[0], rest[1:]) if with_positions else (None, rest)
            cache = DynamicCache(config=self.lm.config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            extra = {"position_ids": position_ids} if with_positions else {}
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                          use_cache=True, **extra)
            flat = []
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    return Wrapped().eval()


# Encoder-decoder families: ``input_ids``, ``attention_mask`` (the encoder's), ``decoder_input_ids``
# and the decoder's self-attention cache ``past_key.i``/``past_value.i`` -> ``logits`` and
# ``present_key.i``/``present_value.i`` (cross-attention keys/values are recomputed from the
# encoder's output each call: no cross cache in or out).
ENC_DEC = {"marian"}


def wrap_seq2seq(lm):
    import torch
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    layers = lm.config.decoder_layers

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, decoder_input_ids, *past):
            own = DynamicCache(config=self.lm.config)
            for i in range(layers):
                own.update(past[2 * i], past[2 * i + 1], i)
            cache = EncoderDecoderCache(own, DynamicCache(config=self.lm.config))
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids, cache=cache, use_cache=True)
            flat = []
            for layer in out.past_key_values.self_attention_cache.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    return Wrapped().eval()


def seq2seq_inputs(lm, batch: int = 2, seq: int = 6, target: int = 4, past: int = 3,
                   seed: int = SEED):
    """``(args, names)`` of ``wrap_seq2seq``: encoder ids and a mask of ones ``[B, seq]``,
    decoder ids ``[B, target]``, the decoder's past keys/values ``[B, H, past, d]``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    cfg = lm.config
    layers, heads = cfg.decoder_layers, cfg.decoder_attention_heads
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    target_ids = torch.randint(0, VOCAB, (batch, target), generator=g)
    pasts = [torch.randn(batch, heads, past, cfg.d_model // heads, generator=g)
             for _ in range(2 * layers)]
    names = ["input_ids", "attention_mask", "decoder_input_ids",
             *[f"past_{k}.{i}" for i in range(layers) for k in ("key", "value")]]
    return (ids, torch.ones(batch, seq, dtype=torch.long), target_ids, *pasts), names


def _cache_shapes(lm) -> list[tuple[int, int]]:
    """``(heads, width)`` of each cached tensor (layer 0's key, its value, layer 1's ...), read
    off the cache the model itself returns for one token: not every attention caches
    ``num_key_value_heads`` x ``head_dim`` (DeepSeek-V3's latent attention keeps one head, keys
    ``qk_nope + qk_rope`` wide and values ``v_head_dim``)."""
    import torch

    with torch.no_grad():
        out = lm(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=True)
    layers = out.past_key_values.layers
    return [(t.shape[1], t.shape[3]) for layer in layers for t in (layer.keys, layer.values)]


def example_inputs(lm, batch: int = 2, seq: int = 5, past: int = 3, with_positions: bool = True,
                   seed: int = SEED):
    """``(args, names)``: token ids, a mask of ones, positions ``past ..``, past keys/values."""
    import torch

    g = torch.Generator().manual_seed(seed)
    cfg = lm.config
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    positions = torch.arange(past, past + seq)[None].expand(batch, seq).contiguous()
    pasts = [torch.randn(batch, heads, past, width, generator=g)
             for heads, width in _cache_shapes(lm)]
    names = ["input_ids", "attention_mask", *(["position_ids"] if with_positions else []),
             *[f"past_{k}.{i}" for i in range(cfg.num_hidden_layers) for k in ("key", "value")]]
    args = (ids, mask, *([positions] if with_positions else []), *pasts)
    return args, names


TAKES_POSITIONS = {"gpt2", "gptj", "gpt_neox", "opt", "phi", "qwen2", "mistral", "xglm",
                   "phi3-longrope"}


# Families exported without a cache (input_ids, attention_mask -> logits): none now. MPT was,
# because torch.export (torch 2.13, strict and non-strict) failed on its cache path with an
# unbounded `seq` Dim: "Eq(s70 + Max(0, -s15 - 2*s70 + 1), 1) is inconsistent!" -- MPT slices
# its [H, 1, L] bias from `max(0, 1 - query_length)` with query_length = seq + (past + seq)
# (transformers 5.24 counts the new tokens twice), which a 0-token step could make 1. The same
# error with Dim.AUTO everywhere and with `max=256` bounds; `Dim("seq", min=1)` (a step adds at
# least one token) resolves the Max to 0 and the export holds at every past length (measured
# against torch at past 0..255). Dims cannot add (past + seq for the mask: NotImplementedError),
# and TorchScript (dynamo=False, dynamic_axes) also exports it correctly; dynamo is used.
NO_CACHE: set[str] = set()
SEQ_MIN_1 = {"mpt"}


def _logits(lm):
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask):
            return self.lm(input_ids=input_ids, attention_mask=attention_mask,
                           use_cache=False).logits

    return Logits().eval()


def export(family: str, folder: Path, opset: int | None = None) -> Path:
    """``folder/model.onnx`` (and ``model.onnx.data``): ``family``'s tiny model as
    ``torch.onnx.export(..., dynamo=True)`` writes it, batch/seq/past dynamic; ``opset``: its
    ``opset_version`` (torch's default, 20, when None; at 23 torch writes the rotations as ONNX's
    RotaryEmbedding itself)."""
    import torch

    if opset is not None:
        return _at_opset(family, folder, opset)

    lm = model(family)
    if family in ENC_DEC:
        args, names = seq2seq_inputs(lm)
        layers = lm.config.decoder_layers
        batch, seq, target = (torch.export.Dim(n) for n in ("batch", "seq", "target"))
        past = torch.export.Dim("past")
        shapes = ({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: target},
                  tuple([{0: batch, 2: past}] * (2 * layers)))
        outputs = ["logits",
                   *[f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "model.onnx"
        torch.onnx.export(wrap_seq2seq(lm), args, path, dynamo=True, dynamic_shapes=shapes,
                          input_names=names, output_names=outputs, verbose=False)
        return path
    if family in NO_CACHE:
        g = torch.Generator().manual_seed(SEED)
        args = (torch.randint(0, VOCAB, (2, 8), generator=g), torch.ones(2, 8, dtype=torch.long))
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=256)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "model.onnx"
        torch.onnx.export(_logits(lm), args, path, dynamo=True,
                          dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
                          input_names=["input_ids", "attention_mask"],
                          output_names=["logits"], verbose=False)
        return path
    with_positions = family in TAKES_POSITIONS or family.startswith("llama")
    args, names = example_inputs(lm, with_positions=with_positions)
    layers = lm.config.num_hidden_layers
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("seq", **({"min": 1} if family in SEQ_MIN_1 else {}))
    past, total = torch.export.Dim("past"), torch.export.Dim("total")
    shapes = ({0: batch, 1: seq}, {0: batch, 1: total},
              (*([{0: batch, 1: seq}] if with_positions else []),
               *[{0: batch, 2: past}] * (2 * layers)))
    outputs = ["logits", *[f"present_{k}.{i}" for i in range(layers) for k in ("key", "value")]]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    torch.onnx.export(wrap(lm, with_positions), args, path, dynamo=True,
                      dynamic_shapes=shapes, input_names=names, output_names=outputs,
                      verbose=False)
    return path


def _at_opset(family: str, folder: Path, opset: int) -> Path:
    import torch

    plain = torch.onnx.export

    def export_at(*args, **kwargs):
        return plain(*args, **kwargs, opset_version=opset)

    torch.onnx.export = export_at
    try:
        return export(family, folder)
    finally:
        torch.onnx.export = plain


def export_torchscript(family: str, folder: Path) -> Path:
    """``folder/model.onnx`` by the TorchScript exporter (``dynamo=False``, opset 18), the way it
    still works for these models: no cache (``use_cache=False``), ``input_ids``,
    ``attention_mask``, ``position_ids`` -> ``logits``; one self-contained file."""
    import torch

    lm = model(family)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids, attention_mask, position_ids):
            return self.lm(input_ids=input_ids, attention_mask=attention_mask,
                           position_ids=position_ids, use_cache=False).logits

    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, VOCAB, (2, 8), generator=g)
    args = (ids, torch.ones(2, 8, dtype=torch.long), torch.arange(8)[None].expand(2, 8))
    names = ["input_ids", "attention_mask", "position_ids"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    torch.onnx.export(Logits().eval(), args, str(path), dynamo=False, opset_version=18,
                      input_names=names, output_names=["logits"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    return path


def torch_outputs(family: str, feeds: dict) -> list:
    """``family``'s model in torch on onnxruntime-style ``feeds`` (numpy, by input name)."""
    import torch

    lm = model(family)
    if family in ENC_DEC:
        _, names = seq2seq_inputs(lm)
        with torch.no_grad():
            return [t.numpy() for t in wrap_seq2seq(lm)(*[torch.from_numpy(feeds[n])
                                                           for n in names])]
    if family in NO_CACHE:
        with torch.no_grad():
            return [_logits(lm)(torch.from_numpy(feeds["input_ids"]),
                                torch.from_numpy(feeds["attention_mask"])).numpy()]
    with_positions = "position_ids" in feeds
    _, names = example_inputs(lm, with_positions=with_positions)
    args = [torch.from_numpy(feeds[n]) for n in names]
    with torch.no_grad():
        return [t.numpy() for t in wrap(lm, with_positions)(*args)]
