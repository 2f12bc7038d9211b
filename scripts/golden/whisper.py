#!/usr/bin/env python3
"""Golden references for the Whisper speech-to-text pipeline.

Builds a tiny Whisper of the real architecture (transformers'
WhisperForConditionalGeneration: 80 mel bins, 1500 encoder positions, 448
decoder positions, the multilingual vocabulary of 51865 ids), exports it in
the onnx-community layout the pipeline loads, runs transformers' own
long-form decoding on a handful of clips and writes what it did to
test/golden/whisper/reference.json. `npm test` compares the pipeline against
that file without Python; this script regenerates it.

    python3 -m venv /work/venv-golden
    /work/venv-golden/bin/pip install torch transformers onnx onnxruntime onnxscript soundfile numpy librosa
    /work/venv-golden/bin/python scripts/golden/whisper.py            # model, reference, ONNX
    /work/venv-golden/bin/python scripts/golden/whisper.py --clips    # also re-synthesise the clips (espeak-ng)

Without --clips the committed WAVs are the input (espeak-ng's output differs
between its versions; the WAVs are the ground truth). Everything else is
deterministic: fixed seeds, one torch thread, no sampling that matters (see
"repetitive" below).

The model
---------
Random weights (torch.manual_seed) give a decoder that emits either nothing
but timestamps or one token over and over, on every input alike. So the
decoder's embeddings, positions and final LayerNorm are *designed* (the rest
of the network keeps its random weights), in a way that any implementation
of the architecture computes identically:

* The 32-wide residual stream is split into coordinate blocks, each used
  only through zero-sum vectors (so LayerNorm's mean subtraction never mixes
  them) and each with its own gain in the final LayerNorm (the output
  projection is tied to the token embedding, as in every Whisper): a text
  block (12 dims), a time-code block (8 dims), a control block (7 named
  directions: ts, eot, ns, la, sink, lang, t0) and a mode block (1 dim, gain 0).
* Text tokens have random equal-norm embeddings in the text block; each
  decoder position carries a random text direction, so the likeliest text
  token changes from position to position (varied, confident text).
* Timestamp <|k|> carries a time code (sinusoids of k with periods 9, 70,
  500, 3300 steps) and position p the code of a target time kappa(p) = 5 (p-2)
  steps (0.1 s a token): the likeliest timestamp is the one nearest kappa(p),
  at least 8 nats ahead of any other.
* Each position has a role (text, close, pair, end) that sets how strongly it
  prefers a timestamp and end of text: text runs of 3, 5, 4, 6, 2, ... tokens
  between timestamp pairs, and end of text right after the first closing
  timestamp at or beyond 4.6 s ("end") - a single-timestamp ending.
* <|0.00|> gets a bonus: windows start at 0.00, as real Whisper's do.
* The window's "mode": the second decoder layer's cross-attention attends
  uniformly (zero query) and its output projection maps the window's mean
  encoder state to a level along the mode dimension (fitted by least squares
  over the windows this script decodes, exact); that layer's FFN turns the
  level into a mode vector through GELU steps (4 pairs of units; the other
  124 keep their random weights), so that "normal" windows get exactly zero
  whatever the rounding of the encoder:
    normal  - zero: text and timestamps as above;
    long    - end of text suppressed: 224 tokens, ending in text, so the next
              window resumes at the last timestamp pair;
    silence - a huge "sink" component flattens every other logit (LayerNorm
              divides it out) and adds no-speech and end of text: no-speech
              probability ~1, <|0.00|> then an unlikely end of text, so
              avg_logprob < -1: the window is skipped;
    notext  - flattened likewise, but <|0.00|> and end of text are certain:
              a window that yields only a timestamp and end of text;
    repeat  - " la" (id 635) wins every step by > 60 nats: 224 tokens, the
              compression ratio far above 2.4 at every temperature, so the
              fallback runs the whole ladder and keeps temperature 1.0 - with
              identical tokens, since sampling from such a distribution is
              deterministic in any implementation.
  Windows of the clips get their modes from their content (see `mode_of`).
  A window the fit has not seen (e.g. features computed differently) gets
  whatever level its encoder states give: the golden test then shows it.
* Greedy choices must be clear: any position whose chosen token is less
  than 0.1 nats ahead of the runner-up in any window gets its text direction
  drawn again and everything is redone (the positions are listed in
  reference.json; ONNX Runtime and torch differ by ~0.005 on these logits).

The reference decoding
----------------------
transformers' WhisperForConditionalGeneration.generate(input_features,
return_timestamps=True, condition_on_prev_tokens=True, temperature=(0.0, 0.2,
0.4, 0.6, 0.8, 1.0), compression_ratio_threshold=2.4, logprob_threshold=-1.0,
no_speech_threshold=0.6, return_segments=True, max_new_tokens=224, top_k=0),
on features from WhisperFeatureExtractor(truncation=False, padding="longest")
- transformers' long-form recipe: log-mel normalised over the whole file,
each 30 s window sliced from it and padded with zeros (openai/whisper's
transcribe does the same). Choices, all documented in reference.json:
  * max_new_tokens=224: openai/whisper's sample_len (n_text_ctx // 2);
    transformers' default would allow 448 minus the prompt.
  * top_k=0: openai/whisper samples from the whole distribution;
    transformers' GenerationConfig default is top_k=50.
  * language detection: transformers' detect_language needs 3000 frames and
    fails on clips under 30 s, so it is done here exactly as it does it (one
    decoder step on <|startoftranscript|> over the first window, argmax over
    the language tokens) and the language passed to generate. The
    probability is the softmax over the language tokens' logits.
  * transformers' compression ratio is zlib over the token ids as 2-byte
    integers (timestamps and end of text included); openai/whisper's is zlib
    over the decoded text, stripped. Both are recorded; the clips are chosen
    so that the two agree on every fallback decision (checked below).
Per window and per temperature tried, the script records what transformers
computed internally (wrapping generate_with_fallback and _need_fallback):
the prompt (decoder_input_ids), the tokens, avg_logprob (transformers'
_retrieve_avg_logprobs: log-softmax of the filtered scores, end of text
included, divided by the token count with end of text), no_speech_prob (the
WhisperNoSpeechDetection processor: softmax at <|startoftranscript|> of the
unfiltered logits), both compression ratios, whether it fell back or
skipped, and the smallest gap between the chosen token's filtered logit and
the runner-up (how safe greedy decisions are against rounding).

Outputs (test/golden/whisper/)
------------------------------
onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx (input_ids,
encoder_hidden_states, past_key_values.{i}.{decoder,encoder}.{key,value},
use_cache_branch -> logits, present.*; an If on use_cache_branch over the two
decoders, the cache branch returning empty encoder presents as optimum's
merge does), config.json, generation_config.json (openai/whisper-tiny's,
alignment heads those of a 2-layer decoder), preprocessor_config.json,
tokenizer.json (+ its small companions) from ../shared/tokenizers/whisper-multilingual,
clips/*.wav (16 kHz PCM16 mono: speech, silence, noise, repeat, long) and reference.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import wave
import zlib
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / 'test' / 'golden' / 'whisper'
SHARED = ROOT.parent / 'shared' / 'tokenizers' / 'whisper-multilingual'
SR = 16000

# ----------------------------------------------------------------- the model

D_MODEL, HEADS, FFN, LAYERS = 32, 4, 128, 2
VOCAB = 51865
EOT, SOT, FIRST_LANG, TRANSLATE, TRANSCRIBE = 50257, 50258, 50259, 50358, 50359
SOT_PREV, NO_SPEECH, NO_TIMESTAMPS, TS0 = 50361, 50362, 50363, 50364
N_TS = 1501
LA = 635  # ' la'
SEED = 1234

CODE = list(range(0, 9))    # time code: 8-dim zero-sum subspace
SPEC = list(range(9, 17))   # control directions: 7-dim zero-sum subspace
TEXT = list(range(17, 30))  # text: 12-dim zero-sum subspace
MODE = [30, 31]             # the window's mode level: 1 dim, invisible in the output (final-LN gain 0)
PERIODS = (9, 70, 500, 3300)
CONTROLS = ('ts', 'eot', 'ns', 'la', 'sink', 'lang', 't0')

R_TEXT, A_CODE = 4.0, 3.0   # position embedding: text and time-code amplitudes
S_TEXT = 0.6                # text token embedding norm
A_TS = 0.4                  # time-code amplitude of a timestamp token
ROW = 0.02                  # control component of special rows (small: little self-reinforcement)
G_TEXT = 300.0 / (R_TEXT * S_TEXT)  # final-LN gains: text logits ~300 x cos
G_CODE = 135.0 / (A_CODE * A_TS)    # timestamp peak ~135 nats
G_SPEC = 10000.0
STEP = 5                    # timestamp steps per decoder position (0.1 s)
TEXT_RUNS = (3, 5, 4, 6, 2, 5, 4, 7, 3, 4, 6, 5)
END_TIME = 230              # end of text after the first closing timestamp >= 4.60 s
ROLE_LOGITS = {             # designed logits (before LayerNorm scaling) per role of the predicting position
    'text': {'ts': 80.0, 'eot': 200.0},
    'close': {'ts': 175.0, 'eot': 200.0},
    'pair': {'ts': 175.0, 'eot': 200.0},
    'end': {'ts': 175.0, 'eot': 420.0},
}
T0_BONUS, NS_LOGIT, LANG_LOGIT = 300.0, 0.0, 3.3
ENC_SCALE = 10.0            # the encoder convolutions' random weights x10: audio outweighs positions
MODE_NORM = 4000.0
MIN_GAP = 0.1              # nats between a greedy choice and the runner-up, at least


def zero_sum_basis(n: int) -> np.ndarray:
    u, _, _ = np.linalg.svd(np.eye(n) - 1.0 / n)
    return u[:, : n - 1].T


def place(block: list[int], vec: np.ndarray) -> np.ndarray:
    out = np.zeros(D_MODEL)
    out[block] = vec
    return out


CODE_B, SPEC_B, TEXT_B = zero_sum_basis(len(CODE)), zero_sum_basis(len(SPEC)), zero_sum_basis(len(TEXT))
DIR = {name: place(SPEC, SPEC_B[i]) for i, name in enumerate(CONTROLS)}
MODE_DIR = place(MODE, zero_sum_basis(len(MODE))[0])
# Mode levels: the cross-attention writes level * MODE_LEVEL_UNIT along MODE_DIR; the layer-1 FFN turns the
# (LayerNorm-scaled) level into the mode vector through GELU steps at STEP_AT, exactly zero for "normal".
MODES = ('normal', 'long', 'silence', 'notext', 'repeat')
MODE_LEVELS = (0.0, 2.0, 4.0, 7.0, 12.0)
STEP_AT = (1.0, 2.7, 3.95, 4.8)   # thresholds on the LayerNorm output along MODE_DIR
STEP_SLOPE = 30.0


def time_code(k: float) -> np.ndarray:
    w = 2 * np.pi / np.array(PERIODS)
    c = np.concatenate([[math.cos(x * k), math.sin(x * k)] for x in w]) / 2.0
    return place(CODE, c @ CODE_B)


def text_direction(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(len(TEXT) - 1)
    return place(TEXT, (v / np.linalg.norm(v)) @ TEXT_B)


def roles() -> tuple[list[str], np.ndarray]:
    """Role and target timestamp of each predicting position (the position whose logits choose the next token)."""
    role = ['text'] * 448
    kappa = np.array([min(N_TS - 1, max(0, STEP * (p - 2))) for p in range(448)])
    p, i = 2, 0  # position 2 (<|transcribe|> without a prompt) picks the first timestamp
    while True:
        p += TEXT_RUNS[i % len(TEXT_RUNS)] + 1
        if p + 1 >= 448:
            break
        role[p] = 'close'
        role[p + 1] = 'end' if kappa[p] >= END_TIME else 'pair'
        p += 1
        i += 1
    return role, kappa


def whisper_config():
    from transformers import WhisperConfig
    return WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=D_MODEL, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
        max_source_positions=1500, max_target_positions=448, pad_token_id=EOT, bos_token_id=EOT, eos_token_id=EOT,
        decoder_start_token_id=SOT, begin_suppress_tokens=[220, EOT], tie_word_embeddings=True,
        scale_embedding=False, activation_function='gelu', median_filter_width=7, use_cache=True,
    )


def build_model(redraw: dict[int, int] | None = None):
    """The model with every designed weight in place but the mode map (cross-attention out_proj) zero.

    `redraw` maps a decoder position to how many times its text direction has been drawn again (a
    position whose greedy choice was too close a call, see main)."""
    from transformers import WhisperForConditionalGeneration
    torch.manual_seed(SEED)
    model = WhisperForConditionalGeneration(whisper_config()).eval()
    rng = np.random.default_rng(SEED)
    E = np.stack([S_TEXT * text_direction(rng) for _ in range(VOCAB)])
    E[LA] += ROW * DIR['la']
    E[EOT] = ROW * DIR['eot']
    E[NO_SPEECH] = ROW * DIR['ns']
    langs = np.arange(FIRST_LANG, TRANSLATE)
    preference = rng.uniform(0.0, 0.6, len(langs))
    preference[0], preference[2] = 1.0, 0.85  # en, then de
    for i, t in enumerate(langs):
        E[t] = preference[i] * ROW * DIR['lang']
    for k in range(N_TS):
        E[TS0 + k] = A_TS * time_code(k) + ROW * DIR['ts']
    E[TS0] += ROW * DIR['t0']

    role, kappa = roles()
    prng = np.random.default_rng(SEED + 1)
    P = np.zeros((448, D_MODEL))
    for p in range(448):
        direction = text_direction(prng)
        if redraw and p in redraw:
            direction = text_direction(np.random.default_rng([SEED + 2, p, redraw[p]]))
        P[p] = R_TEXT * direction + A_CODE * time_code(kappa[p])
        unit = G_SPEC * ROW * math.sqrt(D_MODEL) / np.linalg.norm(P[p])  # logit per unit of a control component
        want = ROLE_LOGITS[role[p]]
        P[p] += (want['ts'] * DIR['ts'] + want['eot'] * DIR['eot'] + T0_BONUS * DIR['t0'] + NS_LOGIT * DIR['ns'] + LANG_LOGIT * DIR['lang']) / unit
    gain = np.zeros(D_MODEL)
    gain[CODE], gain[SPEC], gain[TEXT] = G_CODE, G_SPEC, G_TEXT

    with torch.no_grad():
        enc = model.model.encoder
        enc.conv1.weight.mul_(ENC_SCALE)
        enc.conv2.weight.mul_(ENC_SCALE)
        dec = model.model.decoder
        dec.embed_tokens.weight.copy_(torch.tensor(E, dtype=torch.float32))
        dec.embed_positions.weight.copy_(torch.tensor(P, dtype=torch.float32))
        dec.layer_norm.weight.copy_(torch.tensor(gain, dtype=torch.float32))
        dec.layer_norm.bias.zero_()
        ca = dec.layers[1].encoder_attn
        ca.q_proj.weight.zero_()
        ca.q_proj.bias.zero_()
        ca.v_proj.weight.copy_(torch.eye(D_MODEL))
        ca.v_proj.bias.zero_()
        ca.out_proj.weight.zero_()
        ca.out_proj.bias.zero_()
        # The gate: step k = gelu(s (l - t_k)) - gelu(s (l - t_k) - 1), 0 below t_k and 1 above, l the level
        # after the FFN's LayerNorm; each step adds the difference between consecutive modes' vectors.
        ffn = dec.layers[1]
        mode_dir = torch.tensor(MODE_DIR, dtype=torch.float32)
        for k, at in enumerate(STEP_AT):
            delta = torch.tensor(mode_vector(MODES[k + 1]) - mode_vector(MODES[k]), dtype=torch.float32)
            for j, shift in enumerate((0.0, 1.0)):
                unit = 2 * k + j
                ffn.fc1.weight[unit] = STEP_SLOPE * mode_dir
                ffn.fc1.bias[unit] = -STEP_SLOPE * at - shift
                ffn.fc2.weight[:, unit] = delta if shift == 0.0 else -delta
        # Every other unit keeps its random weights but ignores the mode dimension.
        ffn.fc1.weight[2 * len(STEP_AT):, MODE] = 0.0
        for layer in dec.layers:
            for lin in (layer.fc1, layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.encoder_attn.q_proj):
                if lin is not ffn.fc1:
                    lin.weight[:, MODE] = 0.0
    assert model.proj_out.weight is model.model.decoder.embed_tokens.weight
    return model


def mode_vector(mode: str) -> np.ndarray:
    per = G_SPEC * ROW * math.sqrt(D_MODEL) / MODE_NORM  # nats per unit of a control component at |v| = MODE_NORM
    unit_normal = G_SPEC * ROW  # nats per unit with an ordinary stream (|x| ~ sqrt(d))
    if mode == 'normal':
        return np.zeros(D_MODEL)
    if mode == 'long':
        return -300.0 / unit_normal * DIR['eot']
    if mode == 'silence':
        return MODE_NORM * DIR['sink'] + (8 * DIR['eot'] + 20 * DIR['ns'] + 4 * DIR['t0'] + 5 * DIR['lang']) / per
    if mode == 'notext':
        return MODE_NORM * DIR['sink'] + (40 * DIR['eot'] - 20 * DIR['ns'] + 20 * DIR['t0'] + 5 * DIR['lang']) / per
    if mode == 'repeat':
        return MODE_NORM * DIR['la'] + (-20 * DIR['ns'] + 60 * DIR['t0'] + 5 * DIR['lang']) / per
    raise ValueError(mode)


def set_mode_map(model, means: np.ndarray, levels: np.ndarray) -> None:
    """Cross-attention out_proj: w.m_i + b = level_i exactly (minimum norm), written along MODE_DIR."""
    X = np.hstack([means, np.ones((len(means), 1))])
    sol, *_ = np.linalg.lstsq(X, levels, rcond=None)
    assert np.abs(X @ sol - levels).max() < 1e-6, 'mode map cannot fit these windows'
    with torch.no_grad():
        ca = model.model.decoder.layers[1].encoder_attn
        ca.out_proj.weight.copy_(torch.tensor(np.outer(MODE_DIR, sol[:-1]), dtype=torch.float32))
        ca.out_proj.bias.copy_(torch.tensor(sol[-1] * MODE_DIR, dtype=torch.float32))


# ----------------------------------------------------------------- clips

SENTENCES = {
    'speech': 'The quick brown fox jumps over the lazy dog near the river bank.',
    'speech2': 'Seven bright lanterns hung above the quiet harbour at night.',
    'repeat': 'la la la la la la la la la la la la',
}
# The long clip: (start second, clip) pieces over 70 s of silence.
LONG = {'seconds': 70.0, 'pieces': [(0.5, 'speech'), (6.8, 'speech2'), (13.5, 'speech'), (56.0, 'speech2')]}
CLIPS = ('speech', 'silence', 'noise', 'repeat', 'long')
CLIP_NOTES = {
    'speech': 'espeak-ng sentence, one window: text segments between timestamp pairs, a single-timestamp ending; '
              'the last segment ends past the end of the clip (segment times are not clamped)',
    'silence': '5 s of zeros: no_speech_prob ~1 with avg_logprob < -1 (<|0.00|> then an unlikely <|endoftext|>): the window is skipped',
    'noise': '5 s of white noise: <|0.00|><|endoftext|>, a window with no text (one empty segment over the window)',
    'repeat': 'espeak-ng "la la la ...": " la" x 223, compression ratio > 2.4 at every temperature; the fallback runs to 1.0 and keeps it',
    'long': '70 s: speech, pauses, 38 s of silence, speech. Window 1 runs to the 224-token limit and ends in text, so window 2 '
            'resumes at its last timestamp pair; window 2 is silence (skipped); window 3 is conditioned on the previous '
            'segments (prompt) and its last segment ends past the end of the clip',
}


def write_wav(path: Path, pcm: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(pcm.astype('<i2').tobytes())


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), 'rb') as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, SR), path
        return np.frombuffer(w.readframes(w.getnframes()), dtype='<i2').copy()


def espeak(text: str) -> np.ndarray:
    import librosa
    import soundfile
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / 'x.wav'
        subprocess.run(['espeak-ng', '-v', 'en', '-s', '150', '-w', str(out), text], check=True)
        audio, rate = soundfile.read(str(out), dtype='float64')
    audio = librosa.resample(audio, orig_sr=rate, target_sr=SR, res_type='soxr_hq')
    return np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def make_clips(folder: Path) -> None:
    pcm = {name: espeak(text) for name, text in SENTENCES.items()}
    pcm['silence'] = np.zeros(5 * SR, dtype=np.int16)
    noise = np.random.default_rng(7).standard_normal(5 * SR) * 0.1 * 32768.0
    pcm['noise'] = np.clip(np.round(noise), -32768, 32767).astype(np.int16)
    long = np.zeros(int(LONG['seconds'] * SR), dtype=np.int16)
    for start, name in LONG['pieces']:
        at = int(round(start * SR))
        long[at: at + len(pcm[name])] = pcm[name]
    pcm['long'] = long
    for name in CLIPS:
        write_wav(folder / 'clips' / f'{name}.wav', pcm[name])


# ----------------------------------------------------------------- features and windows

def feature_extractor():
    from transformers import WhisperFeatureExtractor
    return WhisperFeatureExtractor.from_pretrained(str(SHARED))


def features(fe, pcm: np.ndarray) -> torch.Tensor:
    audio = pcm.astype(np.float32) / 32768.0
    return fe(audio, sampling_rate=SR, return_tensors='pt', truncation=False, padding='longest').input_features


def window(feats: torch.Tensor, seek: int) -> torch.Tensor:
    piece = feats[:, :, seek: seek + 3000]
    return torch.nn.functional.pad(piece, (0, 3000 - piece.shape[-1]))


def encoder_mean(model, win: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model.model.encoder(win).last_hidden_state[0].double().mean(0).numpy()


def mode_of(clip: str, seek: int, pcm: np.ndarray) -> str:
    if clip == 'speech':
        return 'normal'
    if clip in ('silence', 'noise', 'repeat'):
        return {'silence': 'silence', 'noise': 'notext', 'repeat': 'repeat'}[clip]
    content = pcm[seek * 160: (seek + 3000) * 160]
    if not content.any():
        return 'silence'
    return 'long' if seek == 0 else 'normal'


# ----------------------------------------------------------------- the reference run

GEN_KW = dict(
    task='transcribe', return_timestamps=True, condition_on_prev_tokens=True,
    temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0), compression_ratio_threshold=2.4, logprob_threshold=-1.0,
    no_speech_threshold=0.6, return_segments=True, max_new_tokens=224, top_k=0,
)


def generation_config_json() -> dict:
    gc = json.loads((SHARED / 'generation_config.json').read_text())
    # openai/whisper-tiny's generation_config.json since its "Correct long-form generation config
    # parameters 'max_initial_timestamp_index' and 'prev_sot_token_id'" commit (#39).
    gc['max_initial_timestamp_index'] = 50
    gc['prev_sot_token_id'] = SOT_PREV
    # whisper-tiny's alignment heads name layers 2 and 3; this decoder has 2 layers: its last layer's heads.
    gc['alignment_heads'] = [[LAYERS - 1, h] for h in range(HEADS)]
    return dict(sorted(gc.items()))


def detect_language(model, first_window: torch.Tensor, gc: dict) -> dict:
    """transformers' detect_language (argmax over the language tokens at <|startoftranscript|>), with the probability."""
    with torch.no_grad():
        logits = model(input_features=first_window, decoder_input_ids=torch.tensor([[SOT]]), use_cache=False).logits[0, -1].double()
    ids = list(gc['lang_to_id'].values())
    lang = logits[ids]
    probs = torch.softmax(lang, dim=-1)
    best = int(torch.argmax(lang))
    ranked = sorted(range(len(ids)), key=lambda i: -float(lang[i]))
    code = {v: k for k, v in gc['lang_to_id'].items()}[ids[best]].strip('<|>')
    return {
        'code': code, 'token': ids[best], 'probability': float(probs[best]),
        'logit_margin': float(lang[ranked[0]] - lang[ranked[1]]),
        'top': [{'code': {v: k for k, v in gc['lang_to_id'].items()}[ids[i]].strip('<|>'), 'probability': float(probs[i])} for i in ranked[:3]],
    }


def text_compression_ratio(tok, tokens: list[int]) -> tuple[str, float]:
    """openai/whisper: zlib over the utf-8 of the decoded text tokens, stripped."""
    text = tok.decode([t for t in tokens if t < EOT], skip_special_tokens=True).strip()
    data = text.encode('utf-8')
    return text, (len(data) / len(zlib.compress(data)) if data else 0.0)


class Recorder:
    """Wraps generate_with_fallback and _need_fallback on one model to record every window and attempt."""

    def __init__(self, model, tok):
        self.model, self.tok, self.windows = model, tok, []
        cls = type(model)
        self.orig_gwf, self.orig_nf = cls.generate_with_fallback, cls._need_fallback
        rec = self

        def generate_with_fallback(this, segment_input, decoder_input_ids, cur_bsz, seek, batch_idx_map, temperatures, generation_config, *args, **kwargs):
            rec.windows.append({'seek': int(seek[0]), 'input': segment_input.clone(), 'prompt': decoder_input_ids[0].tolist(), 'attempts': []})
            return rec.orig_gwf(this, segment_input, decoder_input_ids, cur_bsz, seek, batch_idx_map, temperatures, generation_config, *args, **kwargs)

        def need_fallback(this, seek_sequence, seek_outputs, index, logits_processor, generation_config, vocab_size, temperature):
            needs, skip = rec.orig_nf(this, seek_sequence, seek_outputs, index, logits_processor, generation_config, vocab_size, temperature)
            from transformers.generation.logits_process import WhisperNoSpeechDetection
            tokens = seek_sequence.tolist()
            scores = seek_outputs[index]['scores']
            avg = float(this._retrieve_avg_logprobs(scores, seek_sequence, temperature))
            ns = [p for p in logits_processor if isinstance(p, WhisperNoSpeechDetection)][0].no_speech_prob[index]
            text, ratio_text = text_compression_ratio(rec.tok, tokens)
            # The gap between the chosen token and the runner-up among the filtered scores (temperature undone).
            scale = temperature if temperature and temperature > 0 else 1.0
            gaps = []
            for step, s in enumerate(scores[: len(tokens)]):
                row = s.double() * scale
                top2 = torch.topk(row, 2).values
                gaps.append(float(top2[0] - top2[1]) if torch.isfinite(top2[1]) else float('inf'))
                assert int(torch.argmax(row)) == tokens[step] or (temperature and temperature > 0)
            rec.windows[-1]['attempts'].append({
                'temperature': float(temperature if temperature is not None else 0.0),
                'tokens': tokens,
                'ended_with_eot': bool(tokens and tokens[-1] == EOT),
                'text': text,
                'avg_logprob': avg,
                'no_speech_prob': float(ns),
                'compression_ratio': ratio_text,
                'compression_ratio_transformers': float(this._retrieve_compression_ratio(seek_sequence, vocab_size)),
                'needs_fallback': bool(needs),
                'should_skip': bool(skip),
                'min_greedy_gap': min(gaps) if gaps else None,
                'gaps': gaps,
            })
            return needs, skip

        cls.generate_with_fallback = generate_with_fallback
        cls._need_fallback = need_fallback
        mode_dir = torch.tensor(MODE_DIR, dtype=torch.float32)

        def level_hook(_module, _inputs, output):
            if rec.windows:
                values = (output.detach() @ mode_dir).flatten()
                w = rec.windows[-1]
                lo, hi = float(values.min()), float(values.max())
                w['level'] = [min(lo, w.get('level', [lo, hi])[0]), max(hi, w.get('level', [lo, hi])[1])]

        self.hook = model.model.decoder.layers[1].final_layer_norm.register_forward_hook(level_hook)

    def close(self):
        cls = type(self.model)
        cls.generate_with_fallback, cls._need_fallback = self.orig_gwf, self.orig_nf
        self.hook.remove()


def transcribe(model, tok, gc: dict, feats: torch.Tensor, language: str):
    rec = Recorder(model, tok)
    try:
        out = model.generate(feats, language=language, **GEN_KW)
    finally:
        rec.close()
    return out['segments'][0], rec.windows


def float_list(x) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=np.float32).ravel()]


def feature_summary(f: np.ndarray) -> dict:
    """[80, frames] float32: a checksum and exact samples (all floats are float32 values)."""
    f = np.ascontiguousarray(f, dtype=np.float32)
    frames = f.shape[1]
    cols = sorted({0, 1, 2, frames // 2, frames - 2, frames - 1} & set(range(frames)))
    return {
        'shape': list(f.shape),
        'sha256': hashlib.sha256(f.astype('<f4').tobytes()).hexdigest(),
        'max': float(f.max()), 'min': float(f.min()), 'mean': float(f.astype(np.float64).mean()),
        'columns': {str(c): float_list(f[:, c]) for c in cols},
        'row0_first100': float_list(f[0, :100]),
    }


def run_reference(model, tok, fe, gc: dict, pcms: dict[str, np.ndarray]) -> dict:
    clips = {}
    for name in CLIPS:
        pcm = pcms[name]
        feats = features(fe, pcm)
        lang = detect_language(model, window(feats, 0), gc)
        segments, windows = transcribe(model, tok, gc, feats, lang['code'])
        total = feats.shape[-1]
        win_out = []
        for w in windows:
            chosen = next((a for a in w['attempts'] if not a['needs_fallback']), w['attempts'][-1])
            skipped = chosen['should_skip']
            tokens = chosen['tokens'][:-1] if chosen['ended_with_eot'] else chosen['tokens']
            f = w['input'][0].numpy()
            win_out.append({
                'seek': w['seek'],
                'frames': int(min(3000, total - w['seek'])),
                'time_offset': w['seek'] / 100.0,
                'mode': mode_of(name, w['seek'], pcm),
                'mode_level': w['level'],
                'prompt': w['prompt'],
                'features': feature_summary(f),
                'attempts': w['attempts'],
                'temperature': chosen['temperature'],
                'skipped': skipped,
                'tokens': tokens,
                'text_tokens': [t for t in tokens if t < EOT],
                'avg_logprob': chosen['avg_logprob'],
                'compression_ratio': chosen['compression_ratio'],
                'no_speech_prob': chosen['no_speech_prob'],
            })
        # Each segment carries its window's values, as openai/whisper's transcribe reports them.
        seg_out = []
        for s in segments:
            start = float(s['start'])
            wi = max(i for i, w in enumerate(win_out) if w['time_offset'] <= start + 1e-9 and not w['skipped'])
            w = win_out[wi]
            toks = [int(t) for t in s['tokens'].tolist()]
            seg_out.append({
                'window': wi, 'seek': w['seek'], 'start': start, 'end': float(s['end']),
                'text': tok.decode([t for t in toks if t < EOT], skip_special_tokens=True),
                'tokens': toks,
                'temperature': w['temperature'], 'avg_logprob': w['avg_logprob'],
                'compression_ratio': w['compression_ratio'], 'no_speech_prob': w['no_speech_prob'],
            })
        full = feats[0].numpy()
        clips[name] = {
            'file': f'clips/{name}.wav',
            'exercises': CLIP_NOTES[name],
            'samples': int(len(pcm)),
            'duration': len(pcm) / SR,
            'pcm_sha256': hashlib.sha256(pcm.astype('<i2').tobytes()).hexdigest(),
            'features': {**feature_summary(full), 'log10_max': float(4.0 * full.max() - 4.0)},
            'language': lang,
            'windows': win_out,
            'segments': seg_out,
            'text': ''.join(s['text'] for s in seg_out).strip(),
        }
    return clips


# ----------------------------------------------------------------- fitting the modes

def fit_modes(model, fe, tok, gc, pcms) -> list[dict]:
    """Fits the mode map over every window the reference decodes (repeats until the set of windows is stable)."""
    known: dict[tuple[str, int], np.ndarray] = {}
    feats = {name: features(fe, pcms[name]) for name in CLIPS}
    for name in CLIPS:
        known[(name, 0)] = encoder_mean(model, window(feats[name], 0))
    for _ in range(12):
        keys = sorted(known)
        set_mode_map(model, np.array([known[k] for k in keys]), np.array([MODE_LEVELS[MODES.index(mode_of(k[0], k[1], pcms[k[0]]))] for k in keys]))
        new = False
        for name in CLIPS:
            lang = detect_language(model, window(feats[name], 0), gc)
            _, windows = transcribe(model, tok, gc, feats[name], lang['code'])
            for w in windows:
                if (name, w['seek']) not in known:
                    known[(name, w['seek'])] = encoder_mean(model, w['input'])
                    new = True
        if not new:
            return [{'clip': k[0], 'seek': k[1], 'mode': mode_of(k[0], k[1], pcms[k[0]])} for k in sorted(known)]
    raise RuntimeError('the windows did not settle')


# ----------------------------------------------------------------- ONNX export

class EncoderExport(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.encoder = model.model.encoder

    def forward(self, input_features):
        return self.encoder(input_features).last_hidden_state


class DecoderExport(torch.nn.Module):
    """Whisper's decoder written out (HF's weights, HF's arithmetic) with explicit caches, one graph per branch."""

    def __init__(self, model, with_past: bool):
        super().__init__()
        self.dec = model.model.decoder
        self.with_past = with_past

    @staticmethod
    def heads(x, b):
        return x.view(b, -1, HEADS, D_MODEL // HEADS).transpose(1, 2)

    @staticmethod
    def attend(q, k, v, mask=None):
        w = torch.matmul(q, k.transpose(2, 3))
        if mask is not None:
            w = w + mask
        w = torch.softmax(w, dim=-1)
        o = torch.matmul(w, v).transpose(1, 2)
        return o.reshape(o.shape[0], o.shape[1], D_MODEL)

    def forward(self, input_ids, encoder_hidden_states, *past):
        dec, b, n = self.dec, input_ids.shape[0], input_ids.shape[1]
        past_len = past[0].shape[2] if self.with_past else 0
        x = dec.embed_tokens(input_ids)
        positions = torch.arange(n, device=input_ids.device) + past_len
        x = x + dec.embed_positions.weight[positions]
        total = past_len + n
        qpos = positions.unsqueeze(1)
        kpos = torch.arange(total, device=input_ids.device).unsqueeze(0)
        mask = torch.where(kpos > qpos, torch.tensor(torch.finfo(torch.float32).min), torch.tensor(0.0))
        presents = []
        for i, layer in enumerate(dec.layers):
            sa = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            q = self.heads(sa.q_proj(h) * sa.scaling, b)
            k = self.heads(sa.k_proj(h), b)
            v = self.heads(sa.v_proj(h), b)
            if self.with_past:
                k = torch.cat([past[4 * i], k], dim=2)
                v = torch.cat([past[4 * i + 1], v], dim=2)
            x = x + sa.out_proj(self.attend(q, k, v, mask))
            ca = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = self.heads(ca.q_proj(h) * ca.scaling, b)
            if self.with_past:
                ck, cv = past[4 * i + 2], past[4 * i + 3]
            else:
                ck = self.heads(ca.k_proj(encoder_hidden_states), b)
                cv = self.heads(ca.v_proj(encoder_hidden_states), b)
            x = x + ca.out_proj(self.attend(q, ck, cv))
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(torch.nn.functional.gelu(layer.fc1(h)))
            presents += [k, v] + ([] if self.with_past else [ck, cv])
        x = dec.layer_norm(x)
        logits = torch.matmul(x, dec.embed_tokens.weight.t())
        return (logits, *presents)


def cache_names(prefix: str, i: int) -> list[str]:
    return [f'{prefix}.{i}.decoder.key', f'{prefix}.{i}.decoder.value', f'{prefix}.{i}.encoder.key', f'{prefix}.{i}.encoder.value']


def export_onnx(model, folder: Path) -> None:
    import onnx
    from onnx import TensorProto, helper
    folder.mkdir(parents=True, exist_ok=True)
    hd = D_MODEL // HEADS
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.onnx.export(
            EncoderExport(model), (torch.zeros(1, 80, 3000),), str(folder / 'encoder_model.onnx'),
            input_names=['input_features'], output_names=['last_hidden_state'],
            dynamic_axes={'input_features': {0: 'batch_size'}, 'last_hidden_state': {0: 'batch_size'}},
            opset_version=17, dynamo=False, do_constant_folding=True,
        )
        enc_states = torch.zeros(1, 1500, D_MODEL)
        dec_inputs = ['input_ids', 'encoder_hidden_states']
        dyn = {'input_ids': {0: 'batch_size', 1: 'decoder_sequence_length'}, 'encoder_hidden_states': {0: 'batch_size', 1: 'encoder_sequence_length / 2'}}
        no_past_out = ['logits'] + [n for i in range(LAYERS) for n in cache_names('present', i)]
        torch.onnx.export(
            DecoderExport(model, False), (torch.zeros(1, 4, dtype=torch.long), enc_states), str(tmp / 'no_past.onnx'),
            input_names=dec_inputs, output_names=no_past_out, dynamic_axes=dyn, opset_version=17, dynamo=False, do_constant_folding=False,
        )
        past_in = [n for i in range(LAYERS) for n in cache_names('past_key_values', i)]
        past = []
        for i in range(LAYERS):
            past += [torch.zeros(1, HEADS, 4, hd), torch.zeros(1, HEADS, 4, hd), torch.zeros(1, HEADS, 1500, hd), torch.zeros(1, HEADS, 1500, hd)]
        with_past_out = ['logits'] + [n for i in range(LAYERS) for n in cache_names('present', i)[:2]]
        dyn_past = dict(dyn)
        for i in range(LAYERS):
            names = cache_names('past_key_values', i)
            dyn_past[names[0]] = dyn_past[names[1]] = {0: 'batch_size', 2: 'past_decoder_sequence_length'}
            dyn_past[names[2]] = dyn_past[names[3]] = {0: 'batch_size', 2: 'encoder_sequence_length_out'}
        torch.onnx.export(
            DecoderExport(model, True), (torch.zeros(1, 1, dtype=torch.long), enc_states, *past), str(tmp / 'with_past.onnx'),
            input_names=dec_inputs + past_in, output_names=with_past_out, dynamic_axes=dyn_past, opset_version=17, dynamo=False, do_constant_folding=False,
        )
        merged = merge_decoders(onnx.load(str(tmp / 'no_past.onnx')), onnx.load(str(tmp / 'with_past.onnx')), hd)
        onnx.checker.check_model(merged)
        onnx.save(merged, str(folder / 'decoder_model_merged.onnx'))


def merge_decoders(no_past, with_past, hd: int):
    """One graph: If(use_cache_branch) over the two decoders, weights shared at the top level (optimum's layout)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    init: dict[str, onnx.TensorProto] = {}
    rename: dict[str, dict[str, str]] = {'no_past': {}, 'with_past': {}}
    digest = {}
    for tag, g in (('no_past', no_past.graph), ('with_past', with_past.graph)):
        for t in g.initializer:
            key = hashlib.sha256(t.SerializeToString().replace(t.name.encode(), b'')).hexdigest() + str(list(t.dims)) + str(t.data_type)
            if key in digest:
                rename[tag][t.name] = digest[key]
                continue
            name = t.name if t.name not in init else f'{tag}/{t.name}'
            t2 = onnx.TensorProto()
            t2.CopyFrom(t)
            t2.name = name
            init[name] = t2
            digest[key] = name
            rename[tag][t.name] = name
    outer_inputs = {'input_ids', 'encoder_hidden_states', *[n for i in range(LAYERS) for n in cache_names('past_key_values', i)]}
    outputs = ['logits'] + [n for i in range(LAYERS) for n in cache_names('present', i)]

    def branch(tag: str, g) -> onnx.GraphProto:
        local = rename[tag]

        def name(x: str) -> str:
            if x == '' or x in outer_inputs:
                return x
            return local.get(x, f'{tag}/{x}')

        nodes = []
        for nd in g.node:
            n2 = onnx.NodeProto()
            n2.CopyFrom(nd)
            del n2.input[:]
            n2.input.extend(name(x) for x in nd.input)
            del n2.output[:]
            n2.output.extend(name(x) for x in nd.output)
            n2.name = f'{tag}/{nd.name}'
            nodes.append(n2)
        produced = {o.name for o in g.output}
        outs = []
        for o in outputs:
            if o in produced:
                outs.append(helper.make_tensor_value_info(name(o), TensorProto.FLOAT, None))
            else:  # the cache branch's encoder presents: empty constants, as optimum's merge adds them
                const = helper.make_node('Constant', [], [f'{tag}/{o}'], name=f'{tag}/{o}/empty',
                                         value=helper.make_tensor('empty', TensorProto.FLOAT, [0, HEADS, 1, hd], []))
                nodes.append(const)
                outs.append(helper.make_tensor_value_info(f'{tag}/{o}', TensorProto.FLOAT, None))
        return helper.make_graph(nodes, tag, [], outs)

    if_node = helper.make_node('If', ['use_cache_branch'], outputs, name='optimum::if',
                               then_branch=branch('with_past', with_past.graph), else_branch=branch('no_past', no_past.graph))
    inputs = [
        helper.make_tensor_value_info('input_ids', TensorProto.INT64, ['batch_size', 'decoder_sequence_length']),
        helper.make_tensor_value_info('encoder_hidden_states', TensorProto.FLOAT, ['batch_size', 'encoder_sequence_length / 2', D_MODEL]),
    ]
    outs = [helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['batch_size', 'decoder_sequence_length', VOCAB])]
    for i in range(LAYERS):
        p, q = cache_names('past_key_values', i), cache_names('present', i)
        inputs += [
            helper.make_tensor_value_info(p[0], TensorProto.FLOAT, ['batch_size', HEADS, 'past_decoder_sequence_length', hd]),
            helper.make_tensor_value_info(p[1], TensorProto.FLOAT, ['batch_size', HEADS, 'past_decoder_sequence_length', hd]),
            helper.make_tensor_value_info(p[2], TensorProto.FLOAT, ['batch_size', HEADS, 'encoder_sequence_length_out', hd]),
            helper.make_tensor_value_info(p[3], TensorProto.FLOAT, ['batch_size', HEADS, 'encoder_sequence_length_out', hd]),
        ]
        outs += [
            helper.make_tensor_value_info(q[0], TensorProto.FLOAT, ['batch_size', HEADS, 'past_decoder_sequence_length + 1', hd]),
            helper.make_tensor_value_info(q[1], TensorProto.FLOAT, ['batch_size', HEADS, 'past_decoder_sequence_length + 1', hd]),
            helper.make_tensor_value_info(q[2], TensorProto.FLOAT, ['batch_size', HEADS, 'encoder_sequence_length_out', hd]),
            helper.make_tensor_value_info(q[3], TensorProto.FLOAT, ['batch_size', HEADS, 'encoder_sequence_length_out', hd]),
        ]
    inputs.append(helper.make_tensor_value_info('use_cache_branch', TensorProto.BOOL, [1]))
    graph = helper.make_graph([if_node], 'main_graph', inputs, outs, initializer=list(init.values()))
    model = helper.make_model(graph, opset_imports=list(no_past.opset_import), producer_name='lserve scripts/golden/whisper.py')
    model.ir_version = no_past.ir_version
    return model


def check_onnx(model, folder: Path, clips: dict, fe, pcms) -> dict:
    """Greedy-decodes the first window of every clip through ONNX Runtime with the reference prompt; the tokens must match."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    enc = ort.InferenceSession(str(folder / 'onnx' / 'encoder_model.onnx'), opts, providers=['CPUExecutionProvider'])
    dec = ort.InferenceSession(str(folder / 'onnx' / 'decoder_model_merged.onnx'), opts, providers=['CPUExecutionProvider'])
    hd = D_MODEL // HEADS
    worst_logit = 0.0
    for name, clip in clips.items():
        feats = features(fe, pcms[name])
        for w in clip['windows']:
            win = window(feats, w['seek'])
            states = enc.run(['last_hidden_state'], {'input_features': win.numpy()})[0]
            with torch.no_grad():
                ref_states = model.model.encoder(win).last_hidden_state.numpy()
            assert np.abs(states - ref_states).max() < 1e-3, (name, float(np.abs(states - ref_states).max()))
            attempt = w['attempts'][0]
            prompt = w['prompt']
            feeds = {'input_ids': np.array([prompt], dtype=np.int64), 'encoder_hidden_states': states, 'use_cache_branch': np.array([False])}
            for i in range(LAYERS):
                for n in cache_names('past_key_values', i):
                    feeds[n] = np.zeros((1, HEADS, 0, hd), dtype=np.float32)
            names = ['logits'] + [n for i in range(LAYERS) for n in cache_names('present', i)]
            out = dict(zip(names, dec.run(names, feeds)))
            with torch.no_grad():
                ref = model(encoder_outputs=(torch.tensor(ref_states),), decoder_input_ids=torch.tensor([prompt + attempt['tokens'][:-1]])).logits[0].numpy()
            worst_logit = max(worst_logit, float(np.abs(out['logits'][0] - ref[: len(prompt)]).max()))
            cache = {n: out[n] for n in names[1:]}
            for step, token in enumerate(attempt['tokens'][:-1][:40]):
                feeds = {'input_ids': np.array([[token]], dtype=np.int64), 'encoder_hidden_states': states, 'use_cache_branch': np.array([True])}
                for i in range(LAYERS):
                    p, q = cache_names('past_key_values', i), cache_names('present', i)
                    for a, b in zip(p, q):
                        feeds[a] = cache[b]
                res = dict(zip(names, dec.run(names, feeds)))
                for i in range(LAYERS):
                    q = cache_names('present', i)
                    cache[q[0]], cache[q[1]] = res[q[0]], res[q[1]]
                worst_logit = max(worst_logit, float(np.abs(res['logits'][0, -1] - ref[len(prompt) + step]).max()))
    return {'max_abs_logit_difference_vs_torch': worst_logit}


# ----------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--clips', action='store_true', help='re-synthesise the clips with espeak-ng (else the committed WAVs)')
    parser.add_argument('--out', type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out: Path = args.out
    from transformers import WhisperTokenizerFast
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    if args.clips or not (out / 'clips' / 'long.wav').exists():
        make_clips(out)
    pcms = {name: read_wav(out / 'clips' / f'{name}.wav') for name in CLIPS}
    tok = WhisperTokenizerFast.from_pretrained(str(SHARED))
    fe = feature_extractor()
    gc = generation_config_json()
    from transformers import GenerationConfig
    redraw: dict[int, int] = {}
    for _ in range(20):
        model = build_model(redraw)
        model.generation_config = GenerationConfig(**gc)
        windows = fit_modes(model, fe, tok, gc, pcms)
        print('mode map fitted over', len(windows), 'windows:', ', '.join(f"{w['clip']}@{w['seek']}={w['mode']}" for w in windows))
        clips = run_reference(model, tok, fe, gc, pcms)
        # Greedy choices closer than MIN_GAP nats could go the other way in another implementation's
        # rounding: draw those positions' text directions again and start over.
        close = sorted({len(w['prompt']) - 1 + i for clip in clips.values() for w in clip['windows'] for a in w['attempts']
                        if a['temperature'] == 0.0 for i, g in enumerate(a['gaps']) if g < MIN_GAP})
        if not close:
            break
        print('too close to call at positions', close, '- drawing them again')
        for p in close:
            redraw[p] = redraw.get(p, 0) + 1
    else:
        raise RuntimeError('could not make every greedy choice clear')
    for clip in clips.values():
        for w in clip['windows']:
            for a in w['attempts']:
                del a['gaps']

    # The mode gate must be far from its thresholds at every decoder step of every window.
    bounds = (-math.inf,) + STEP_AT + (math.inf,)
    for name, clip in clips.items():
        for w in clip['windows']:
            k = MODES.index(w['mode'])
            lo, hi = w['mode_level']
            assert bounds[k] + 0.15 < lo and hi < bounds[k + 1] - 0.15, (name, w['seek'], w['mode'], lo, hi)

    # The fallback decision must not depend on which compression ratio is used.
    for name, clip in clips.items():
        for w in clip['windows']:
            for a in w['attempts']:
                assert (a['compression_ratio'] > 2.4) == (a['compression_ratio_transformers'] > 2.4), (name, w['seek'], a['temperature'])

    (out / 'onnx').mkdir(parents=True, exist_ok=True)
    export_onnx(model, out / 'onnx')
    model.config.architectures = ['WhisperForConditionalGeneration']
    model.config.to_json_file(str(out / 'config.json'))
    (out / 'generation_config.json').write_text(json.dumps(gc, indent=2) + '\n')
    for f in ('preprocessor_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'added_tokens.json'):
        shutil.copyfile(SHARED / f, out / f)
    onnx_check = check_onnx(model, out, clips, fe, pcms)
    print('onnx check:', onnx_check)

    role, kappa = roles()
    reference = {
        'generator': 'scripts/golden/whisper.py',
        'versions': {'transformers': __import__('transformers').__version__, 'torch': torch.__version__,
                     'onnx': __import__('onnx').__version__, 'onnxruntime': __import__('onnxruntime').__version__,
                     'numpy': np.__version__},
        'model': {'d_model': D_MODEL, 'layers': LAYERS, 'heads': HEADS, 'vocab_size': VOCAB, 'seed': SEED,
                  'redrawn_positions': {str(k): v for k, v in sorted(redraw.items())},
                  'fitted_windows': windows, 'onnx_check': onnx_check,
                  'end_time': END_TIME * 0.02, 'seconds_per_position': STEP * 0.02},
        'decoding': {
            'call': 'WhisperForConditionalGeneration.generate(input_features, language=<detected>, ' + ', '.join(f'{k}={v!r}' for k, v in GEN_KW.items()) + ')',
            'features': "WhisperFeatureExtractor(truncation=False, padding='longest'): log-mel over the whole file, normalised by its maximum; each window sliced at seek and padded with 0.0 to 3000 frames",
            'language': 'detect_language as transformers does it (argmax over lang_to_id at <|startoftranscript|>, first window); probability = softmax over the language tokens',
            'avg_logprob': 'transformers _retrieve_avg_logprobs: sum of log-softmax(filtered scores) of the tokens including <|endoftext|>, divided by their count (with <|endoftext|>); when a window stops at max_new_tokens without <|endoftext|>, divided by the token count (openai/whisper: count + 1)',
            'compression_ratio': 'openai/whisper: len(utf8) / len(zlib.compress(utf8)) of the decoded text tokens, stripped (0 for empty text); compression_ratio_transformers: the same over the token ids as 2-byte little-endian integers, end of text included, which is what transformers compares with the threshold',
            'no_speech_prob': 'softmax of the unfiltered logits at <|startoftranscript|>, id of <|nocaptions|> (no_timestamps_token_id - 1)',
            'temperature': 'the first temperature whose attempt needs no fallback, else the last; should_skip (avg_logprob < -1 and no_speech_prob > 0.6) skips the window',
            'prompt': 'decoder_input_ids of the window: [<|startofprev|>] + the tokens of every previous segment, timestamps included (a segment that ends on two timestamps - the last one of a window resumed at its last pair - loses the second), at most the last 223 + [<|startoftranscript|>, <|lang|>, <|transcribe|>]; none after a window decoded at temperature 0.5 or above',
            'segments': 'transformers: text between timestamp pairs; a window ending on a single timestamp is consumed whole, one ending otherwise resumes at its last timestamp pair; a window without a pair is one segment up to its last timestamp (or the window end); times are not clamped to the audio. Each segment carries its window values (openai/whisper reports them per segment the same way).',
        },
        'clips': clips,
    }
    (out / 'reference.json').write_text(json.dumps(reference, indent=1, ensure_ascii=False) + '\n')
    for name, clip in clips.items():
        print(f"{name}: {clip['language']['code']} p={clip['language']['probability']:.3f}; "
              + '; '.join(f"w@{w['seek']} {w['mode']} T={w['temperature']} {'skip' if w['skipped'] else len(w['tokens'])} "
                          f"lp={w['avg_logprob']:.3f} cr={w['compression_ratio']:.2f} ns={w['no_speech_prob']:.3f} "
                          f"gap={min((a['min_greedy_gap'] or 1e9) for a in w['attempts'] if a['temperature'] == 0):.3g}" for w in clip['windows']))
        for s in clip['segments']:
            print(f"    {s['start']:.2f}-{s['end']:.2f} {s['text'][:60]!r}")


if __name__ == '__main__':
    main()
