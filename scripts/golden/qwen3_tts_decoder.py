#!/usr/bin/env python3
"""Golden reference for the Qwen3-TTS 12 Hz codec decoder (codes -> 24 kHz wav).

Runs upstream's own Qwen3TTSTokenizerV2Decoder (QwenLM/Qwen3-TTS, Apache-2.0),
eager attention, float32, on the weights stored in an exported
tok_decoder.onnx, so lserve's decoder is checked against the reference math
and not against the ONNX graph it also runs.

    /work/venv-golden/bin/pip install torch transformers numpy onnx
    /work/venv-golden/bin/python scripts/golden/qwen3_tts_decoder.py \
        --onnx PATH/tok_decoder.onnx --config PATH/speech_tokenizer/config.json \
        --frames 12 --seed 7 --out test/golden/qwen3-tts-decoder/golden.json \
        [--upstream DIR]   # checkout holding qwen_tts/ (default $QWEN_TTS_SRC or /work/qref)
"""

import argparse
import base64
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import transformers

UPSTREAM_FILE = "QwenLM/Qwen3-TTS qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py"


def install_shims():
    """Upstream was written against transformers 4.57; these are the only places
    where it breaks under 5.x. Each shim restores the 4.57 behaviour exactly."""
    import transformers.masking_utils as mu
    import transformers.modeling_rope_utils as ru
    import transformers.utils.generic as gen

    # 5.x made check_model_inputs a plain decorator (an alias of
    # merge_with_config_defaults); upstream calls it as a factory,
    # `@check_model_inputs()`, which raises TypeError at import.
    real_check = gen.check_model_inputs
    if not hasattr(real_check, "_qwen_tts_shim"):
        def check_model_inputs(func=None, **_):
            return real_check if func is None else real_check(func)
        check_model_inputs._qwen_tts_shim = True
        gen.check_model_inputs = check_model_inputs

    # 5.x dropped the "default" entry (each model now carries its own
    # compute_default_rope_parameters); upstream looks it up by name.
    # Same formula as 4.57's _compute_default_rope_parameters.
    if "default" not in ru.ROPE_INIT_FUNCTIONS:
        def default_rope(config, device=None, **_):
            base = config.rope_theta
            dim = int((getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
                      * getattr(config, "partial_rotary_factor", 1.0))
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
            return inv_freq, 1.0
        ru.ROPE_INIT_FUNCTIONS["default"] = default_rope

    # 5.x renamed the mask builders' `input_embeds` to `inputs_embeds` and
    # dropped `cache_position` (offsets now come from the cache; without one
    # they are 0, as 4.57's arange cache_position gave). Upstream passes both
    # by keyword, a TypeError at forward time.
    def adapt(fn):
        if getattr(fn, "_qwen_tts_shim", False):
            return fn
        def wrapped(*args, input_embeds=None, cache_position=None, **kwargs):
            if input_embeds is not None:
                kwargs["inputs_embeds"] = input_embeds
            return fn(*args, **kwargs)
        wrapped._qwen_tts_shim = True
        return wrapped
    mu.create_causal_mask = adapt(mu.create_causal_mask)
    mu.create_sliding_window_causal_mask = adapt(mu.create_sliding_window_causal_mask)


def load_upstream(upstream):
    """Load only the two tokenizer_12hz modules: importing the qwen_tts package
    itself pulls in the whole inference stack."""
    root = Path(upstream) / "qwen_tts" / "core" / "tokenizer_12hz"
    if not root.is_dir():
        sys.exit(f"no {root}: pass --upstream (a Qwen3-TTS checkout) or set QWEN_TTS_SRC")
    install_shims()
    # A stub package so the module's relative `from .configuration_... import` resolves.
    pkg = types.ModuleType("qwen_tts_tok12")
    pkg.__path__ = [str(root)]
    sys.modules[pkg.__name__] = pkg
    mods = {}
    for name in ("configuration_qwen3_tts_tokenizer_v2", "modeling_qwen3_tts_tokenizer_v2"):
        spec = importlib.util.spec_from_file_location(f"{pkg.__name__}.{name}", root / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        mods[name] = mod
    return (mods["configuration_qwen3_tts_tokenizer_v2"].Qwen3TTSTokenizerV2DecoderConfig,
            mods["modeling_qwen3_tts_tokenizer_v2"].Qwen3TTSTokenizerV2Decoder)


def onnx_decoder_weights(path):
    """The exporter kept the torch module names, prefixed `decoder.`, and torch layouts."""
    model = onnx.load(str(path), load_external_data=True)
    prefix = "decoder."
    return {t.name[len(prefix):]: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
            for t in model.graph.initializer if t.name.startswith(prefix)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True, help="tok_decoder.onnx (external data beside it is read too)")
    ap.add_argument("--config", required=True, help="speech_tokenizer/config.json (its decoder_config is used)")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True)
    ap.add_argument("--upstream", default=os.environ.get("QWEN_TTS_SRC", "/work/qref"))
    args = ap.parse_args()

    DecoderConfig, Decoder = load_upstream(args.upstream)
    cfg = DecoderConfig(**json.loads(Path(args.config).read_text())["decoder_config"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)  # init values are all overwritten; seeded only so a build is repeatable
    decoder = Decoder(cfg).float().eval()

    weights = onnx_decoder_weights(args.onnx)
    # Non-persistent buffers (rotary inv_freq) are rebuilt from the config, not stored.
    # The quantizers' input_proj encodes: decode never reads it, so a decoder graph holds none (kept at its init).
    state = decoder.state_dict()
    unread = {k for k in state if k.startswith("quantizer.") and ".input_proj." in k}
    weights.update({k: state[k] for k in unread if k not in weights})
    expected = set(state)
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        print("missing:", missing, "\nunexpected:", unexpected, file=sys.stderr)
        sys.exit("ONNX initializers do not match the decoder's state_dict")
    decoder.load_state_dict(weights, strict=True)

    codes = np.random.default_rng(args.seed).integers(0, cfg.codebook_size, size=(1, cfg.num_quantizers, args.frames))
    with torch.no_grad():
        wav = decoder(torch.from_numpy(codes).long())
    samples_per_frame = int(decoder.total_upsample)
    assert tuple(wav.shape) == (1, 1, args.frames * samples_per_frame), wav.shape
    samples = wav.reshape(-1).numpy().astype("<f4")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "seed": args.seed,
        "frames": args.frames,
        # frame-major [T][num_quantizers], as the ONNX input audio_codes [1, T, 16]
        "codes": codes[0].T.tolist(),
        "samples_f32_base64": base64.b64encode(samples.tobytes()).decode("ascii"),
        "max_abs": float(np.abs(samples).max()),
        "rms": float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))),
        "upstream": UPSTREAM_FILE,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }) + "\n")
    print(f"{out}: {samples.size} samples, max_abs {np.abs(samples).max():.4f}")


if __name__ == "__main__":
    main()
