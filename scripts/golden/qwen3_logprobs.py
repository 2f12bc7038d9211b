#!/usr/bin/env python3
"""Golden references for log-probabilities and fill-in-the-middle (Qwen3).

Builds a tiny Qwen3 of the real architecture (transformers'
Qwen3ForCausalLM: per-head RMSNorm on queries and keys, grouped-query
attention, SwiGLU, tied embeddings) with the real 151,936-id Qwen2/Qwen3
vocabulary and byte-level BPE tokenizer, Qwen3's added tokens at their real
ids (<think>, <tool_call>, the FIM tokens...) and Qwen3's chat template,
converts it at f32 with the bundled llama.cpp's own convert_hf_to_gguf.py,
and writes what transformers (fp32) computes to
test/golden/qwen3-logprobs/reference.json: every prompt token's log-probability
and the top 5 at each position, greedy continuations with theirs, and one
fill-in-the-middle prompt laid out as Qwen2.5-Coder's model card does. Tests
compare lserve's logprobs and infill against that file without Python; this
script regenerates it (see test/golden/qwen3-logprobs/README.md).

    python3 -m venv /work/venv-golden
    /work/venv-golden/bin/pip install torch transformers numpy safetensors sentencepiece protobuf pyyaml
    /work/venv-golden/bin/python scripts/golden/qwen3_logprobs.py [--llama-src DIR]
    /work/venv-golden/bin/python scripts/golden/qwen3_logprobs.py --search   # look for a new SEED

It shares qwen2_vl.py's vocabulary, conversion and JSON helpers. The llama.cpp
source (converter, gguf-py, models/ggml-vocab-qwen2.gguf,
models/templates/Qwen-Qwen3-0.6B.jinja) is node-llama-cpp's bundled one, as
for qwen2_vl.py, or a checkout of the same commit given with --llama-src.
scripts/golden/qwen3_logprobs_check.py checks the result against llama.cpp's
own llama-server.

The model
---------
2 layers 16 wide, 2 query heads of 16 over 1 KV head (head_dim 16, wider than
hidden / heads, as Qwen3 allows), SwiGLU 64 wide, rotary base 1e6 as Qwen3's,
tied embeddings: the 151,936 x 16 embedding (9.7 MB) and the tokenizer (6 MB)
are nearly all of the 15.7 MB file. The GGUF is f32, so llama.cpp reads exactly
the weights transformers ran; the two differ only in arithmetic: 4e-4 nats at
most in f32, 0.009 with llama.cpp's f16 KV cache, 0.02 with its flash
attention on CPU (see the README).

Seeded random weights, as qwen2_vl.py's, with these choices:

* The logits are spread: with unit-variance embeddings tied to the output and
  the final norm's gain at FINAL_NORM_GAIN, the logits of a position have a
  standard deviation of about 4 * FINAL_NORM_GAIN nats, so the most likely
  token has a log-probability of a few nats below zero, not log(1/151936) =
  -11.93 like every other token (which would make any comparison pass).
* The MLPs write MLP_GAIN times more into the residual stream than a
  unit-preserving init would: with tied embeddings the token just read would
  otherwise dominate the last hidden state and be predicted again, and every
  greedy continuation would repeat one token.
* The rows of the special and padding tokens (ids >= 151643) and of the
  1,000-odd tokens that hold part of a multi-byte character are 20 times
  shorter: no greedy continuation stops early (at <|im_end|> or
  <|endoftext|>) or ends inside a character, so every one has NEW_TOKENS
  tokens of valid UTF-8 text whatever an implementation does at
  end-of-generation tokens or with incomplete characters. These tokens still
  occur in the prompts (the chat prompt's <|im_start|>, the emoji's bytes).
* SEED is the first seed (from 1) whose every greedy step (the two greedy
  prompts and the FIM prompt) leads the runner-up by MIN_GAP nats or more and
  whose continuations each have MIN_DISTINCT distinct tokens: llama.cpp then
  picks the same tokens. --search finds one again should another transformers
  compute differently.

The FIM tokens
--------------
convert_hf_to_gguf.py writes no tokenizer.ggml.fim_*_token_id for Qwen models
(llama.cpp finds <|fim_prefix|> and the others by their text when it loads the
vocabulary), so the converted file is rewritten by gguf-py's own
gguf_new_metadata.py with fim_pre/suf/mid/pad/rep/sep set to the real ids, as
a GGUF that declares its FIM tokens has them (what lserve reads to allow a
suffix).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import qwen2_vl as vl

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test" / "golden" / "qwen3-logprobs"
TEMPLATE = "models/templates/Qwen-Qwen3-0.6B.jinja"

SEED = 4
NEW_TOKENS = 8
TOP = 5
MIN_GAP = 0.1
MIN_DISTINCT = 5
MLP_GAIN = 8.0
FINAL_NORM_GAIN = 1.0

# ------------------------------------------------------------------ tokenizer

# Qwen3's added tokens at their real ids (Qwen/Qwen3-0.6B's tokenizer_config.json; special: False for the
# tool and think tags, which llama.cpp then types USER_DEFINED, not CONTROL, as test/fixtures/gguf/qwen3.ts does).
ADDED_TOKENS = [
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True), (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True), (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True), (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True), (151657, "<tool_call>", False),
    (151658, "</tool_call>", False), (151659, "<|fim_prefix|>", True), (151660, "<|fim_middle|>", True),
    (151661, "<|fim_suffix|>", True), (151662, "<|fim_pad|>", True), (151663, "<|repo_name|>", True),
    (151664, "<|file_sep|>", True), (151665, "<tool_response>", False), (151666, "</tool_response>", False),
    (151667, "<think>", False), (151668, "</think>", False),
]
FIRST_ADDED = ADDED_TOKENS[0][0]
VOCAB_SIZE = 151936  # Qwen3's embedding rows: the 267 past the last added token are padding

# gguf_new_metadata.py's names for tokenizer.ggml.<name>_token_id, and the tokens llama.cpp finds by text.
FIM_TOKENS = {"fim_pre": 151659, "fim_suf": 151661, "fim_mid": 151660, "fim_pad": 151662, "fim_rep": 151663, "fim_sep": 151664}


def write_tokenizer(folder: Path, vocab_gguf: Path, gguf, chat_template: str) -> None:
    """Qwen3's tokenizer files (vocab.json, merges.txt, tokenizer_config.json, tokenizer.json) from llama.cpp's Qwen2
    vocabulary, which Qwen3 shares below id 151643."""
    texts, merges = vl.qwen2_vocabulary(vocab_gguf, gguf)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(texts)}, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": special}
            for i, t, special in ADDED_TOKENS
        },
        "additional_special_tokens": [t for i, t, _ in ADDED_TOKENS if 151644 <= i <= 151656],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    from transformers import AutoTokenizer

    # tokenizer.json too, as published: the converter looks the added tokens' ids up in it
    AutoTokenizer.from_pretrained(folder).backend_tokenizer.save(str(folder / "tokenizer.json"))


# ------------------------------------------------------------------ model

DIMS = {"hidden_size": 16, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "rope_theta": 1000000.0}


def qwen3_config(dims: dict) -> dict:
    """config.json in the layout of Qwen/Qwen3-0.6B, with `dims`."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": 40960,
        "max_window_layers": dims["num_hidden_layers"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        # as published (transformers 4 wrote it); without it transformers 5 suspects a Mistral tokenizer and warns
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
        **dims,
    }


def init_weights(model, seed: int, quiet_rows: list[int], torch) -> None:
    """Seeded weights (see the module docstring), kept in f32: the GGUF stores them as they are."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(tuple(shape), generator=gen, dtype=torch.float32) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
            if name.endswith("embed_tokens.weight"):
                value = normal(p.shape, 1.0)
                value[FIRST_ADDED:] *= 0.05
                value[quiet_rows] *= 0.05
            elif "norm" in name:
                # RMSNorm gains (input, post-attention, q_norm, k_norm, final): 1, but the final one sets the
                # logits' spread
                value = torch.full(tuple(p.shape), FINAL_NORM_GAIN if name == "model.norm.weight" else 1.0)
            elif p.ndim == 2:
                gain = MLP_GAIN if name.endswith("down_proj.weight") else 1.0
                value = normal(p.shape, gain / math.sqrt(p.shape[1]))
            else:
                raise SystemExit(f"unexpected parameter {name} {tuple(p.shape)}")
            p.copy_(value)


def build_hf(folder: Path, seed: int, vocab_gguf: Path, gguf, chat_template: str) -> None:
    """The transformers model folder: config, safetensors, tokenizer with the chat template."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_tokenizer(folder, vocab_gguf, gguf, chat_template)
    model = Qwen3ForCausalLM(Qwen3Config(**qwen3_config(DIMS)))
    init_weights(model, seed, vl.partial_utf8_ids(vl.qwen2_vocabulary(vocab_gguf, gguf)[0]), torch)
    model.save_pretrained(folder)
    # keep the published flat config.json (rope_theta at the top), which both transformers and the converter read
    (folder / "config.json").write_text(json.dumps(qwen3_config(DIMS), indent=2) + "\n")


# ------------------------------------------------------------------ prompts

# Plain text of varied length, code, numbers (Qwen splits digits one by one), non-ASCII text whose emoji is
# split into byte tokens, Qwen3's <think> tags (added tokens that are not special), and a chat-templated
# prompt (made from CHAT by the chat template, as a request's messages are).
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who told stories about "
    "the storms he had seen and the fish that got away.",
    "def add(a, b):\n    return a + b\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
    "Grüße aus Köln! 東京は晴れです。Привет, мир! 🙂",
    "<|im_start|>assistant\n<think>\nTwo plus two.\n</think>\n\nThe answer is 4.<|im_end|>",
    None,  # the chat-templated prompt
]
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = [0, 6]  # the prompts whose greedy continuations are recorded: plain text and chat

# As Qwen2.5-Coder's model card lays a fill-in-the-middle prompt out.
FIM_PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n    "
FIM_SUFFIX = "\n\nprint(fibonacci(10))\n"
FIM_TEXT = f"<|fim_prefix|>{FIM_PREFIX}<|fim_suffix|>{FIM_SUFFIX}<|fim_middle|>"


def prompt_texts(tokenizer) -> list[str]:
    chat = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    return [p if p is not None else chat for p in PROMPTS]


# ------------------------------------------------------------------ golden

def rounded(x: float) -> float:
    return round(float(x), 5)


def distribution(logits, torch) -> tuple:
    """Log-softmax (float64, of fp32 logits) and its TOP + 1 largest entries."""
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    values, ids = torch.topk(logprobs, TOP + 1)
    return logprobs, values.tolist(), ids.tolist()


def top_pairs(values, ids) -> list:
    return [[int(i), rounded(v)] for i, v in zip(ids[:TOP], values[:TOP])]


def score_prompt(model, ids: list[int], torch) -> dict:
    """Each position's logprob of the prompt's next token, the top 5 and the 5th-6th gap (one forward pass)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    out = {"logprob": [], "top": [], "gaps": []}
    for i in range(1, len(ids)):
        logprobs, values, top_ids = distribution(logits[i - 1], torch)
        out["logprob"].append(rounded(logprobs[ids[i]]))
        out["top"].append(top_pairs(values, top_ids))
        out["gaps"].append(rounded(values[TOP - 1] - values[TOP]))
    return out


def greedy(model, ids: list[int], torch) -> dict:
    """NEW_TOKENS greedy tokens, each with its logprob, the top 5, the lead over the runner-up and the 5th-6th gap."""
    seq = list(ids)
    out = {"tokens": [], "logprob": [], "top": [], "lead": [], "gaps": []}
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            _, values, top_ids = distribution(logits, torch)
            token = int(top_ids[0])
            out["tokens"].append(token)
            out["logprob"].append(rounded(values[0]))
            out["top"].append(top_pairs(values, top_ids))
            out["lead"].append(rounded(values[0] - values[1]))
            out["gaps"].append(rounded(values[TOP - 1] - values[TOP]))
            seq.append(token)
    return out


def run_cases(folder: Path, torch) -> dict:
    from transformers import AutoTokenizer, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = []
    for source, text in zip(PROMPTS, prompt_texts(tokenizer)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        messages = {} if source is not None else {"messages": CHAT}  # what the chat template rendered
        prompts.append({"text": text, **messages, "ids": ids, **score_prompt(model, ids, torch)})
    greedy_cases = []
    for index in GREEDY:
        case = greedy(model, prompts[index]["ids"], torch)
        greedy_cases.append({"prompt": index, **case, "continuation": tokenizer.decode(case["tokens"])})
    fim_ids = tokenizer(FIM_TEXT, add_special_tokens=False)["input_ids"]
    fim = greedy(model, fim_ids, torch)
    fim_case = {"prefix": FIM_PREFIX, "suffix": FIM_SUFFIX, "text": FIM_TEXT, "ids": fim_ids, **fim,
                "middle": tokenizer.decode(fim["tokens"])}
    return {"prompts": prompts, "greedy": greedy_cases, "fim": fim_case}


def acceptable(cases: dict) -> tuple[bool, str]:
    runs = [*cases["greedy"], cases["fim"]]
    lead = min(min(c["lead"]) for c in runs)
    fewest = min(len(set(c["tokens"])) for c in runs)
    text = all("\ufffd" not in c.get("continuation", c.get("middle")) for c in runs)
    best = max(max(c["logprob"]) for c in runs)
    ok = lead >= MIN_GAP and fewest >= MIN_DISTINCT and text
    return ok, (f"smallest greedy lead {lead:.3f} nats, fewest distinct tokens {fewest}, most likely greedy token "
                f"{best:.2f}{'' if text else ', invalid UTF-8'}")


# ------------------------------------------------------------------ conversion

def llama_source(arg: str | None, tmp: Path) -> Path:
    if arg:
        return Path(arg)
    src = tmp / "llama.cpp"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(vl.BUNDLE), str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "checkout", "--quiet", "HEAD", "--", "convert_hf_to_gguf.py", "conversion", "gguf-py",
                    "models/ggml-vocab-qwen2.gguf", TEMPLATE], check=True)
    return src


def declare_fim(src: Path, converted: Path, out: Path) -> None:
    """A copy of the converted GGUF with tokenizer.ggml.fim_*_token_id set, by gguf-py's gguf_new_metadata.py."""
    args = [sys.executable, str(src / "gguf-py" / "gguf" / "scripts" / "gguf_new_metadata.py"), str(converted), str(out), "--force"]
    for name, token in FIM_TOKENS.items():
        args += ["--special-token-by-id", name, str(token)]
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gguf_new_metadata.py failed:\n{done.stdout}{done.stderr}")


def gguf_facts(path: Path, gguf) -> dict:
    """What the written GGUF declares, read back (a check that conversion and the FIM rewrite did their part)."""
    reader = gguf.GGUFReader(str(path))

    def scalar(key):
        field = reader.fields.get(key)
        if field is None:
            return None
        value = field.parts[field.data[0]]
        return bytes(value).decode() if field.types[0] == gguf.GGUFValueType.STRING else value.tolist()[0]

    tokens = reader.fields["tokenizer.ggml.tokens"]
    types = reader.fields["tokenizer.ggml.token_type"]
    facts = {
        "architecture": scalar("general.architecture"),
        "file_type": scalar("general.file_type"),
        "tokens": len(tokens.data),
        "add_bos_token": scalar("tokenizer.ggml.add_bos_token"),
        "eos_token_id": scalar("tokenizer.ggml.eos_token_id"),
        **{f"{name}_token_id": scalar(f"tokenizer.ggml.{name}_token_id") for name in FIM_TOKENS},
        "tensor_types": sorted({t.tensor_type.name for t in reader.tensors}),
    }
    for i, text, special in ADDED_TOKENS:
        got = bytes(tokens.parts[tokens.data[i]]).decode()
        kind = int(types.parts[types.data[i]][0])
        # llama.cpp's token types: 3 CONTROL (special), 4 USER_DEFINED
        if got != text or kind != (3 if special else 4):
            raise SystemExit(f"{path}: token {i} is {got!r} of type {kind}, expected {text!r}")
    if facts["architecture"] != "qwen3" or facts["tensor_types"] != ["F32"] or facts["tokens"] != VOCAB_SIZE:
        raise SystemExit(f"{path}: unexpected {facts}")
    if any(facts[f"{name}_token_id"] != token for name, token in FIM_TOKENS.items()):
        raise SystemExit(f"{path}: FIM tokens not declared: {facts}")
    return facts


def compact(value, indent: str = "") -> str:
    """JSON with one line per list of numbers or of [id, logprob] pairs: a prompt's ids, a position's top 5."""
    def leaf(v):
        return v is None or isinstance(v, (int, float, str, bool))

    def short(v):
        return leaf(v) or (isinstance(v, list) and all(leaf(x) or (isinstance(x, list) and all(map(leaf, x))) for x in v))

    inner = indent + " "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {compact(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and not short(value):
        return "[\n" + ",\n".join(inner + compact(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value, ensure_ascii=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-src", help="llama.cpp checkout (default: node-llama-cpp's bundled source)")
    parser.add_argument("--out", default=str(OUT), help=f"where model.gguf and reference.json go (default {OUT})")
    parser.add_argument("--hf", help="keep the transformers model folder here")
    parser.add_argument("--search", action="store_true", help="try seeds from 1 until one is acceptable, instead of SEED")
    args = parser.parse_args()

    import torch
    import transformers

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="qwen3-logprobs-golden-"))
    try:
        src = llama_source(args.llama_src, tmp)
        sys.path.insert(0, str(src / "gguf-py"))
        import gguf

        vocab_gguf = src / "models" / "ggml-vocab-qwen2.gguf"
        chat_template = (src / TEMPLATE).read_text(encoding="utf-8")
        folder = Path(args.hf) if args.hf else tmp / "hf"
        seed = 1 if args.search else SEED
        while True:
            build_hf(folder, seed, vocab_gguf, gguf, chat_template)
            cases = run_cases(folder, torch)
            ok, why = acceptable(cases)
            print(f"seed {seed}: {why}", file=sys.stderr)
            if ok:
                break
            if not args.search:
                raise SystemExit(f"SEED {SEED} no longer gives stable, varied continuations: run with --search")
            seed += 1

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        converted = tmp / "converted.gguf"
        vl.convert(src, folder, converted, "Qwen3 tiny random", mmproj=False, outtype="f32")
        declare_fim(src, converted, out / "model.gguf")
        facts = gguf_facts(out / "model.gguf", gguf)
        reference = {
            "generator": "scripts/golden/qwen3_logprobs.py (transformers, fp32; log-softmax in float64, temperature 1, no filtering)",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
            "seed": seed,
            "dims": {**DIMS, "vocab_size": VOCAB_SIZE, "tie_word_embeddings": True},
            "files": {"model.gguf": {"bytes": (out / "model.gguf").stat().st_size, "sha256": vl.sha256(out / "model.gguf")}},
            "gguf": facts,
            "top": TOP,
            "new_tokens": NEW_TOKENS,
            **cases,
        }
        (out / "reference.json").write_text(compact(reference) + "\n", encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
