#!/usr/bin/env python3
"""Checks test/golden/qwen2-audio against llama.cpp's own llama-server.

The reference (reference.json, written by qwen2_audio.py from transformers)
says which tokens the tiny Qwen2-Audio generates greedily for the clip and each
prompt. This starts llama-server on model.gguf + mmproj.gguf and asks for the
same continuations twice per case, as qwen2_vl_check.py does for images:

* /completion, with the reference's chat-templated prompt text, the clip
  standing where <|audio_bos|><|AUDIO|><|audio_eos|> stood (libmtmd writes
  the first and last around the audio embeddings itself);
* /v1/chat/completions, with the clip as an input_audio part (base64 WAV):
  llama.cpp applies the chat template stored in model.gguf.

Both must give the reference's token ids (the chat endpoint its text too) and
count as many prompt tokens. It also prints each step's top-1/top-2 logit gap,
llama.cpp's next to transformers', and the largest difference between them:
with flash attention, which on the CPU sums the attention's values in f16 over
the prompt's 775-odd tokens, that difference is several times what it is
without (--flash-attn off).

With --embd-tool (scripts/golden/qwen2_vl_embd.cpp, built against the same
llama.cpp), it also compares the clip's embeddings, as libmtmd computes them
from the WAV, with the reference's: relative L2 distance at most 1e-2.

    python3 scripts/golden/qwen2_audio_check.py --server /path/to/llama.cpp/build/bin/llama-server \
        [--embd-tool /tmp/qwen2_vl_embd] [--flash-attn on|off]

Standard library only; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

from qwen2_vl_check import check_embeddings, gaps, get, llama_server, post

GOLDEN = Path(__file__).resolve().parents[2] / "test" / "golden" / "qwen2-audio"
AUDIO_SPAN = "<|audio_bos|><|AUDIO|><|audio_eos|>"
CONTEXT = 2048  # the clip alone is 750 tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="llama-server built with libmtmd")
    parser.add_argument("--dir", default=str(GOLDEN))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log", help="write llama-server's output here")
    parser.add_argument("--embd-tool", help="qwen2_vl_embd built from scripts/golden/qwen2_vl_embd.cpp")
    parser.add_argument("--flash-attn", default="auto", choices=["auto", "on", "off"],
                        help="llama-server's flash attention (auto, its default, is on for the CPU)")
    args = parser.parse_args()

    folder = Path(args.dir)
    reference = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
    failures = check_embeddings(args.embd_tool, folder, reference["audio"]) if args.embd_tool else 0
    widest = 0.0
    with llama_server(args.server, folder, args.threads, args.log, CONTEXT, ("-fa", args.flash_attn)) as port:
        marker = get(port, "/props")["media_marker"]
        for case in reference["cases"]:
            clip = base64.b64encode((folder / case["audio"]).read_bytes()).decode()
            want = case["tokens"]
            n = len(want)
            common = {"temperature": 0, "top_k": 1, "cache_prompt": False}

            raw = post(port, "/completion", {
                **common, "prompt": {"prompt_string": case["prompt_text"].replace(AUDIO_SPAN, marker), "multimodal_data": [clip]},
                "n_predict": n, "n_probs": 2, "return_tokens": True, "special": True,
            })
            raw_tokens = raw["tokens"]
            raw_prompt = raw["tokens_evaluated"]

            chat = post(port, "/v1/chat/completions", {
                **common, "max_tokens": n, "logprobs": True, "top_logprobs": 2,
                "messages": [{"role": "user", "content": [
                    {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}},
                    {"type": "text", "text": case["prompt"]},
                ]}],
            })
            entries = chat["choices"][0]["logprobs"]["content"]
            chat_tokens = [e["id"] for e in entries]
            chat_prompt = chat["usage"]["prompt_tokens"]
            chat_text = chat["choices"][0]["message"]["content"]

            ok = (raw_tokens == want and chat_tokens == want and chat_text == case["text"]
                  and raw_prompt == chat_prompt == len(case["prompt_ids"]))
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {case['audio']} | {case['prompt']}")
            print(f"     reference  {want} ({len(case['prompt_ids'])} prompt tokens)")
            print(f"     completion {raw_tokens} ({raw_prompt} prompt tokens)")
            print(f"     chat       {chat_tokens} ({chat_prompt} prompt tokens)")
            if chat_text != case["text"]:
                print(f"     chat text  {chat_text!r}, reference {case['text']!r}")
            ours = gaps(entries)
            print("     gap llama.cpp   " + " ".join(f"{g:7.4f}" for g in ours))
            print("     gap transformers" + " ".join(f"{g:7.4f}" for g in case["gaps"]))
            widest = max([widest, *(abs(a - b) for a, b in zip(ours, case["gaps"]))])
    print(f"largest gap difference {widest:.4f} nats")
    print("all agree" if failures == 0 else f"{failures} disagreement(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
