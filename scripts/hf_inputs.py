"""The Hugging Face inputs the README's `--from-hf-config` examples read, made here (no download).

    python scripts/hf_inputs.py [FOLDER]

writes, under FOLDER (default: the current one):

- ``config.json``: Llama 3.1 8B's RoPE settings (``rope_theta`` 500000, ``llama3`` scaling with
  factor 8 over ``original_max_position_embeddings`` 8192, head dim 4096 / 32 = 128), the
  fields ``edgepe export --from-hf-config`` reads (the rest of a real config is ignored);
- ``gpt2-tiny/``: a random-weight GPT-2 (1 layer, 64 wide, 128 positions, seed 0) saved by
  transformers' ``save_pretrained``: ``config.json`` and ``model.safetensors``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LLAMA31 = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}


def main(argv: list[str]) -> None:
    folder = Path(argv[0]) if argv else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA31, indent=2) + "\n")

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.disable_progress_bar()  # save_pretrained's shard bar: the doc shows one line

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=64, n_head=4, n_layer=1, n_positions=128,
                                      vocab_size=100, bos_token_id=99,
                                      eos_token_id=99)).eval()
    gpt2.save_pretrained(folder / "gpt2-tiny")
    print(f"wrote {folder / 'config.json'} (Llama 3.1's RoPE) and {folder / 'gpt2-tiny'}/ "
          "(a random-weight GPT-2: config.json, model.safetensors)")


if __name__ == "__main__":
    main(sys.argv[1:])
