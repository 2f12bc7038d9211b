#!/usr/bin/env python3
"""Checks test/golden/qwen3-logprobs against llama.cpp's own llama-server.

The reference (reference.json, written by qwen3_logprobs.py from transformers)
gives, for the tiny Qwen3 in model.gguf, every prompt token's logprob with the
top 5 at each position, and greedy continuations (two prompts and a
fill-in-the-middle prompt) with theirs. This starts llama-server on
model.gguf and asks for the same:

* tokens: POST /tokenize of each prompt's text (special tokens parsed) gives
  the reference's ids: llama.cpp's tokenizer agrees with transformers'.
* chat template: POST /apply-template of the chat prompt's messages renders
  the GGUF's template (Qwen3's) to the reference's text, as transformers did.
* FIM tokens: llama.cpp's load log names <|fim_prefix|>, <|fim_suffix|> and
  <|fim_middle|> (and pad, repo, file separator) at their ids.
* prompt tokens: llama-server reports logprobs for generated tokens only
  (its "echo" is refused), so each prompt position is asked for by itself:
  POST /completion with the ids before it, n_predict 1, n_probs 5,
  temperature 0, post_sampling_probs false, and a logit_bias that makes the
  prompt's next token the one generated. With post_sampling_probs false
  llama.cpp takes the probabilities from the raw logits (softmax over the
  whole vocabulary, before the sampler chain and its logit bias), so the
  generated token's logprob and the top 5 are the model's, as the
  reference's are. A token that ends inside a character gets no
  probabilities when generated last, so its position is read from n_probs
  151936 (the whole vocabulary) instead.
* greedy: POST /completion with the prompt's ids, n_predict 8, n_probs 5,
  temperature 0, post_sampling_probs false: the same 8 tokens, their
  logprobs and top 5.

It reports the largest |logprob difference| over every checked token (the
prompt tokens, the generated ones, and every top-5 entry), and whether the
top-5 ids agree in order; where they do not, the reference's gap between
the neighbours that swapped shows whether that is within the difference.
Agreement: same tokens, same greedy continuations, every |difference| at
most --tolerance, and the top 5 in the same order except where a
neighbouring pair is closer than twice the tolerance.

    python3 scripts/golden/qwen3_logprobs_check.py --server /path/to/llama.cpp/build/bin/llama-server \
        [--cache-type f32]

Standard library only; exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "test" / "golden" / "qwen3-logprobs"
VOCAB = 151936
FIM_LOG = {"FIM PRE": 151659, "FIM SUF": 151661, "FIM MID": 151660, "FIM PAD": 151662, "FIM REP": 151663, "FIM SEP": 151664}


def post(port: int, path: str, body: dict, fail: bool = True) -> dict | None:
    """POST body as JSON, the answer's JSON; on an HTTP error, exit (or, with fail False, None)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if not fail:
            return None
        raise SystemExit(f"{path}: HTTP {error.code}: {error.read().decode(errors='replace')}") from None


def get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.load(response)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(server_path: str, model: Path, threads: int, log_path: Path, cache_type: str, extra: tuple = ()):
    """llama-server on model, until the block ends; yields its port."""
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [server_path, "-m", str(model), "--port", str(port), "--host", "127.0.0.1", "-c", "512", "-np", "1",
             "-t", str(threads), "-tb", str(threads), "--no-warmup", "-ctk", cache_type, "-ctv", cache_type, "-lv", "4", *extra],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(600):
                try:
                    if get(port, "/health").get("status") == "ok":
                        break
                except OSError:
                    pass
                if server.poll() is not None:
                    raise SystemExit(f"llama-server exited with {server.returncode}; see {log_path}")
                time.sleep(0.1)
            yield port
        finally:
            server.terminate()
            server.wait(timeout=30)


# The sampling that leaves the model's distribution alone: greedy, probabilities before the sampler chain.
COMMON = {"temperature": 0, "n_probs": 5, "post_sampling_probs": False, "cache_prompt": False, "return_tokens": True}


class Tally:
    def __init__(self, tolerance: float):
        self.tolerance = tolerance
        self.worst = 0.0
        self.worst_where = ""
        self.tokens = 0
        self.top_same = 0
        self.top_swapped_close = 0
        self.whole_vocabulary = 0
        self.failures: list[str] = []

    def logprob(self, where: str, got: float, want: float) -> None:
        diff = abs(got - want)
        if diff > self.worst:
            self.worst, self.worst_where = diff, where
        if diff > self.tolerance:
            self.failures.append(f"{where}: logprob {got:.5f}, reference {want:.5f}")

    def top(self, where: str, got: list[dict], want: list[list], gap56: float) -> None:
        """llama.cpp's top_logprobs against the reference's [id, logprob] pairs (and its 5th-6th gap)."""
        got_ids = [e["id"] for e in got]
        want_ids = [i for i, _ in want]
        want_lp = [lp for _, lp in want]
        got_lp = {e["id"]: e["logprob"] for e in got}
        for i, lp in want:
            if i in got_lp:
                self.logprob(f"{where} top {i}", got_lp[i], lp)
        if got_ids == want_ids:
            self.top_same += 1
            return
        # a different order is no disagreement where the reference's own logprobs are closer than the arithmetic can
        # tell apart: each id llama.cpp puts k-th is within twice the tolerance of the reference's k-th logprob (or,
        # not in the reference's top 5, stands 5th where the reference's 5th and 6th are that close)
        close = 2 * self.tolerance
        ref = dict(want)
        reorder_ok = len(got_ids) == len(want_ids) and all(
            abs(ref[i] - want_lp[k]) <= close if i in ref else (k == len(want_ids) - 1 and gap56 <= close)
            for k, i in enumerate(got_ids)
        )
        if reorder_ok:
            self.top_swapped_close += 1
        else:
            self.failures.append(f"{where}: top 5 {got_ids}, reference {want_ids} (logprobs {want_lp}, 5th-6th gap {gap56})")


def check_fim_log(log: str) -> list[str]:
    """llama.cpp's vocabulary print-out names the FIM tokens it found: each at the reference's id."""
    failures = []
    for name, token in FIM_LOG.items():
        lines = [line for line in log.splitlines() if f"{name} token" in line]
        if not any(f"= {token} " in line for line in lines):
            failures.append(f"llama.cpp's {name} token: {lines or 'none'} (expected {token})")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="llama-server")
    parser.add_argument("--dir", default=str(GOLDEN))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-type", default="f16", choices=["f16", "f32"],
                        help="llama.cpp's KV cache type (-ctk/-ctv; f16 is its default)")
    parser.add_argument("--flash-attn", default="auto", choices=["on", "off", "auto"], help="llama.cpp's -fa")
    parser.add_argument("--tolerance", type=float, default=0.03, help="largest |logprob difference| that agrees (nats)")
    parser.add_argument("--log", help="keep llama-server's output here")
    args = parser.parse_args()

    folder = Path(args.dir)
    reference = json.loads((folder / "reference.json").read_text(encoding="utf-8"))
    tally = Tally(args.tolerance)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(args.log) if args.log else Path(tmp) / "server.log"
        with llama_server(args.server, folder / "model.gguf", args.threads, log_path, args.cache_type,
                          ("-fa", args.flash_attn)) as port:
            tally.failures += check_fim_log(log_path.read_text(errors="replace"))

            for n, prompt in enumerate(reference["prompts"]):
                ids = prompt["ids"]
                tokens = post(port, "/tokenize", {"content": prompt["text"], "add_special": False, "parse_special": True})["tokens"]
                if tokens != ids:
                    tally.failures.append(f"prompt {n}: llama.cpp tokenizes {prompt['text']!r} as {tokens}, reference {ids}")
                if "messages" in prompt:
                    rendered = post(port, "/apply-template", {"messages": prompt["messages"]})["prompt"]
                    if rendered != prompt["text"]:
                        tally.failures.append(f"prompt {n}: llama.cpp renders the chat template as {rendered!r}")
                for i in range(1, len(ids)):
                    where = f"prompt {n} position {i}"
                    answer = post(port, "/completion", {**COMMON, "prompt": ids[:i], "n_predict": 1,
                                                       "logit_bias": [[ids[i], 1000]]}, fail=False)
                    entries = (answer or {}).get("completion_probabilities")
                    if entries:
                        if answer["tokens"] != [ids[i]] or len(entries) != 1 or entries[0]["id"] != ids[i]:
                            tally.failures.append(f"{where}: forced {ids[i]}, got {answer['tokens']}")
                            continue
                        got, top = entries[0]["logprob"], entries[0]["top_logprobs"]
                    else:
                        # A token that ends inside a character (the emoji's bytes) gives no probabilities when
                        # generated last (llama-server holds incomplete UTF-8 back, or answers 500 to text that
                        # starts inside one): ask for the whole vocabulary's at that position instead (1-2 s).
                        answer = post(port, "/completion", {**COMMON, "prompt": ids[:i], "n_predict": 1, "n_probs": VOCAB})
                        everything = answer["completion_probabilities"][0]["top_logprobs"]
                        got = next(e["logprob"] for e in everything if e["id"] == ids[i])
                        top = everything[:5]
                        tally.whole_vocabulary += 1
                    tally.tokens += 1
                    tally.logprob(where, got, prompt["logprob"][i - 1])
                    tally.top(where, top, prompt["top"][i - 1], prompt["gaps"][i - 1])
                print(f"prompt {n}: {len(ids)} tokens, {len(ids) - 1} positions, worst so far {tally.worst:.2e}")

            runs = [(f"greedy {g['prompt']}", reference["prompts"][g["prompt"]]["ids"], g) for g in reference["greedy"]]
            runs.append(("fim", reference["fim"]["ids"], reference["fim"]))
            fim_tokens = post(port, "/tokenize", {"content": reference["fim"]["text"], "add_special": False, "parse_special": True})["tokens"]
            if fim_tokens != reference["fim"]["ids"]:
                tally.failures.append(f"fim: llama.cpp tokenizes the prompt as {fim_tokens}, reference {reference['fim']['ids']}")
            for name, ids, case in runs:
                answer = post(port, "/completion", {**COMMON, "prompt": ids, "n_predict": len(case["tokens"])})
                entries = answer["completion_probabilities"]
                same = answer["tokens"] == case["tokens"]
                print(f"{'ok  ' if same else 'FAIL'} {name}: {answer['tokens']}")
                if not same:
                    tally.failures.append(f"{name}: tokens {answer['tokens']}, reference {case['tokens']}")
                    continue
                for step, entry in enumerate(entries):
                    tally.tokens += 1
                    tally.logprob(f"{name} step {step}", entry["logprob"], case["logprob"][step])
                    tally.top(f"{name} step {step}", entry["top_logprobs"], case["top"][step], case["gaps"][step])

    print(f"KV cache {args.cache_type}, flash attention {args.flash_attn}: {tally.tokens} tokens checked; largest |logprob difference| {tally.worst:.2e} "
          f"({tally.worst_where}); top 5 in the same order at {tally.top_same}, reordered only within near-ties at "
          f"{tally.top_swapped_close}; {tally.whole_vocabulary} prompt tokens read from the whole vocabulary's logprobs")
    for failure in tally.failures:
        print(f"FAIL {failure}")
    print("all agree" if not tally.failures else f"{len(tally.failures)} disagreement(s)")
    sys.exit(1 if tally.failures else 0)


if __name__ == "__main__":
    main()
