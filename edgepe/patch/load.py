"""A saved transformers model folder, read as untrusted input for ``edgepe patch FOLDER``.

The folder must hold ``config.json`` (at most ``CONFIG_LIMIT`` bytes, a JSON object) and its
weights as ``*.safetensors`` (no pickle: a ``pytorch_model.bin`` alone is refused). Nothing is
downloaded (``local_files_only``) and no code from the folder runs: ``trust_remote_code`` is
never set, and a config that asks for it (``auto_map``) is refused before transformers reads it.
The model is built by ``AutoModelForCausalLM`` from the config's ``model_type`` (the classes
transformers ships), or, for a model type it does not map, ``AutoModelForSeq2SeqLM`` (T5) or
``AutoModelForImageTextToText`` (Qwen2-VL: issue 42), in eval mode.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgepe.contract.errors import BadParameterError

CONFIG_LIMIT = 1 << 20  # a real config.json is a few kB


def read_config(folder: Path) -> dict:
    """The folder's ``config.json`` as a dict, checked (module docstring)."""
    if not folder.is_dir():
        raise BadParameterError(f"{str(folder)!r} is not a folder (a saved transformers model: "
                                "config.json and *.safetensors)")
    path = folder / "config.json"
    if not path.is_file():
        raise BadParameterError(f"{str(folder)!r} has no config.json (a saved transformers model "
                                "folder, as save_pretrained writes it)")
    with open(path, "rb") as f:
        raw = f.read(CONFIG_LIMIT + 1)
    if len(raw) > CONFIG_LIMIT:
        raise BadParameterError(f"{str(path)!r} is larger than {CONFIG_LIMIT} bytes")
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadParameterError(f"{str(path)!r} is not JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise BadParameterError(f"{str(path)!r} has no model_type")
    if "auto_map" in config:
        raise BadParameterError(f"{str(path)!r} asks for the model's own code (auto_map); "
                                "edgepe never runs code from a model folder")
    if not any(folder.glob("*.safetensors")):
        raise BadParameterError(f"{str(folder)!r} holds no *.safetensors weights (edgepe reads "
                                "no pickled checkpoint)")
    return config


def load_folder(folder: str | Path):
    """The model saved in ``folder`` (module docstring), in eval mode."""
    folder = Path(folder)
    config = read_config(folder)
    import transformers

    first = ""
    for auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModelForImageTextToText"):
        try:
            model = getattr(transformers, auto).from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False, use_safetensors=True)
        except (ValueError, OSError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if first.startswith("Unrecognized configuration class"):
                continue  # this Auto class does not map the model type: the next one
            break
        return model.eval()
    raise BadParameterError(f"transformers cannot load {str(folder)!r} (model_type "
                            f"{config['model_type']!r}) as a causal LM, a seq2seq LM or an "
                            f"image-text-to-text model: {first}")
