#!/usr/bin/env python3
"""Checks test/golden/qwen2-vl against llama.cpp's own llama-server.

The reference (reference.json, written by qwen2_vl.py from transformers) says
which tokens the tiny Qwen2-VL generates greedily for each image and prompt.
This starts llama-server on model.gguf + mmproj.gguf and asks for the same
continuations twice per case:

* /completion, with the reference's chat-templated prompt text, the image
  standing where <|vision_start|><|image_pad|><|vision_end|> stood (libmtmd
  writes those two tokens around the image embeddings itself);
* /v1/chat/completions, with the image as an image_url data URI: llama.cpp
  applies the chat template stored in model.gguf.

Both must give the reference's token ids (the chat endpoint its text too) and
count as many prompt tokens.
It also prints each step's top-1/top-2 logit gap, llama.cpp's next to
transformers', which shows how far apart the two computations are.

With --embd-tool (scripts/golden/qwen2_vl_embd.cpp, built against the same
llama.cpp), it also compares each image's embeddings, as libmtmd computes
them, with the reference's: relative L2 distance at most 1e-2.

    python3 scripts/golden/qwen2_vl_check.py --server /path/to/llama.cpp/build/bin/llama-server \
        [--embd-tool /tmp/qwen2_vl_embd]

Standard library only; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from array import array
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "test" / "golden" / "qwen2-vl"
IMAGE_SPAN = "<|vision_start|><|image_pad|><|vision_end|>"


def post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise SystemExit(f"{path}: HTTP {error.code}: {error.read().decode(errors='replace')}") from None


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.load(response)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gaps(entries: list[dict]) -> list[float]:
    """top-1 minus top-2 logprob (= logit gap) of each generated step."""
    out = []
    for entry in entries:
        top = sorted((t["logprob"] for t in entry["top_logprobs"]), reverse=True)
        out.append(top[0] - top[1] if len(top) > 1 else math.inf)
    return out


def check_embeddings(tool: str, folder: Path, media: list[dict]) -> int:
    """Compares libmtmd's embeddings of each image (or audio clip) with the reference's; returns the number that differ."""
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for image in media:
            out = Path(tmp) / "embd.f32"
            shape = subprocess.run([tool, str(folder / "model.gguf"), str(folder / "mmproj.gguf"), str(folder / image["file"]), str(out)],
                                   check=True, capture_output=True, text=True).stdout.split()
            got = array("f", out.read_bytes())
            want = [x for row in image["embeddings"]["values"] for x in row]
            same_shape = [int(n) for n in shape] == image["embeddings"]["shape"] and len(got) == len(want)
            diff = math.sqrt(sum((a - b) ** 2 for a, b in zip(got, want))) / math.sqrt(sum(b * b for b in want))
            worst = max(abs(a - b) for a, b in zip(got, want))
            ok = same_shape and diff <= 1e-2
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} embeddings {image['file']}: shape {shape} (reference {image['embeddings']['shape']}), "
                  f"relative L2 distance {diff:.2e}, largest difference {worst:.2e}")
    return failures


@contextlib.contextmanager
def llama_server(server_path: str, folder: Path, threads: int, log_path: str | None, context: int = 1024, extra: tuple = ()):
    """llama-server (with `extra` arguments) on folder's model.gguf + mmproj.gguf, until the block ends; yields its port."""
    port = free_port()
    log = open(log_path, "w") if log_path else subprocess.DEVNULL
    server = subprocess.Popen(
        [server_path, "-m", str(folder / "model.gguf"), "--mmproj", str(folder / "mmproj.gguf"), "--port", str(port),
         "--host", "127.0.0.1", "-c", str(context), "-t", str(threads), "-tb", str(threads), "--no-warmup", "-np", "1", *extra],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if get(port, "/health").get("status") == "ok":
                    break
            except OSError:
                pass
            if server.poll() is not None:
                raise SystemExit(f"llama-server exited with {server.returncode}")
            time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="llama-server built with libmtmd")
    parser.add_argument("--dir", default=str(GOLDEN))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log", help="write llama-server's output here")
    parser.add_argument("--embd-tool", help="qwen2_vl_embd built from scripts/golden/qwen2_vl_embd.cpp")
    args = parser.parse_args()

    folder = Path(args.dir)
    reference = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
    failures = check_embeddings(args.embd_tool, folder, reference["images"]) if args.embd_tool else 0
    with llama_server(args.server, folder, args.threads, args.log) as port:
        marker = get(port, "/props")["media_marker"]
        for case in reference["cases"]:
            image = base64.b64encode((folder / case["image"]).read_bytes()).decode()
            want = case["tokens"]
            n = len(want)
            common = {"temperature": 0, "top_k": 1, "cache_prompt": False}

            raw = post(port, "/completion", {
                **common, "prompt": {"prompt_string": case["prompt_text"].replace(IMAGE_SPAN, marker), "multimodal_data": [image]},
                "n_predict": n, "n_probs": 2, "return_tokens": True, "special": True,
            })
            raw_tokens = raw["tokens"]
            raw_prompt = raw["tokens_evaluated"]

            chat = post(port, "/v1/chat/completions", {
                **common, "max_tokens": n, "logprobs": True, "top_logprobs": 2,
                "messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
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
            print(f"{'ok  ' if ok else 'FAIL'} {case['image']} | {case['prompt']}")
            print(f"     reference  {want} ({len(case['prompt_ids'])} prompt tokens)")
            print(f"     completion {raw_tokens} ({raw_prompt} prompt tokens)")
            print(f"     chat       {chat_tokens} ({chat_prompt} prompt tokens)")
            if chat_text != case["text"]:
                print(f"     chat text  {chat_text!r}, reference {case['text']!r}")
            ours = gaps(entries)
            print("     gap llama.cpp   " + " ".join(f"{g:7.4f}" for g in ours))
            print("     gap transformers" + " ".join(f"{g:7.4f}" for g in case["gaps"]))
    print("all agree" if failures == 0 else f"{failures} disagreement(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
