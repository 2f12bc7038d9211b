"""Text completions and log-probabilities through the official Python `openai` package, unmodified.

Run by test/e2e/completions-python.test.ts against a started lserve serving the
Qwen3 golden model of test/golden/qwen3-logprobs (f32 KV cache), whose
reference log-probabilities come from transformers: LSERVE_URL, LSERVE_MODEL
and LSERVE_REFERENCE (the reference.json path) in the environment. Every
answer is parsed by the SDK into its pydantic classes and checked against the
reference within TOLERANCE nats.
"""

import json
import os
import unittest

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion

URL = os.environ["LSERVE_URL"]
MODEL = os.environ["LSERVE_MODEL"]
with open(os.environ["LSERVE_REFERENCE"], encoding="utf-8") as f:
    REFERENCE = json.load(f)
TOLERANCE = 1e-3

client = openai.OpenAI(base_url=f"{URL}/v1", api_key="unused", max_retries=0)


class Completions(unittest.TestCase):
    def test_scores_prompts_as_an_evaluation_harness_asks(self):
        # One request, several prompts (token ids), echo + logprobs + max_tokens 0: the harness's loglikelihood call.
        prompts = REFERENCE["prompts"][:3]
        answer = client.completions.create(model=MODEL, prompt=[p["ids"] for p in prompts], echo=True, logprobs=3, max_tokens=0)
        self.assertIsInstance(answer, Completion)
        self.assertEqual([c.index for c in answer.choices], [0, 1, 2])
        for choice, prompt in zip(answer.choices, prompts):
            self.assertEqual(choice.finish_reason, "length")
            lp = choice.logprobs
            self.assertEqual(len(lp.tokens), len(prompt["ids"]))
            self.assertIsNone(lp.token_logprobs[0])
            self.assertEqual(lp.text_offset[0], 0)
            self.assertEqual(choice.text, prompt["text"])
            for i, expected in enumerate(prompt["logprob"]):
                self.assertLess(abs(lp.token_logprobs[i + 1] - expected), TOLERANCE, f"{prompt['text']!r} @{i + 1}")
                self.assertEqual(len(lp.top_logprobs[i + 1]), 3)
        self.assertEqual(answer.usage.prompt_tokens, sum(len(p["ids"]) for p in prompts))
        self.assertEqual(answer.usage.completion_tokens, 0)

    def test_continues_greedily_with_the_reference_tokens(self):
        greedy = REFERENCE["greedy"][0]
        prompt = REFERENCE["prompts"][greedy["prompt"]]["text"]
        answer = client.completions.create(model=MODEL, prompt=prompt, max_tokens=len(greedy["tokens"]), temperature=0, logprobs=1)
        self.assertEqual(answer.choices[0].text, greedy["continuation"])
        for got, expected in zip(answer.choices[0].logprobs.token_logprobs, greedy["logprob"]):
            self.assertLess(abs(got - expected), TOLERANCE)

    def test_fills_the_middle(self):
        fim = REFERENCE["fim"]
        answer = client.completions.create(model=MODEL, prompt=fim["prefix"], suffix=fim["suffix"], max_tokens=len(fim["tokens"]), temperature=0)
        self.assertEqual(answer.choices[0].text, fim["middle"])
        self.assertEqual(answer.usage.prompt_tokens, len(fim["ids"]))

    def test_n_best_of_and_a_stream_with_usage(self):
        text = REFERENCE["prompts"][0]["text"]
        answer = client.completions.create(model=MODEL, prompt=[text, text + " and"], n=2, best_of=3, max_tokens=3, seed=7)
        self.assertEqual(sorted(c.index for c in answer.choices), [0, 1, 2, 3])
        stream = client.completions.create(model=MODEL, prompt=text, max_tokens=4, temperature=0, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertTrue(all(isinstance(c, Completion) for c in chunks))
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 4)
        streamed = "".join(c.choices[0].text for c in chunks[:-1] if c.choices)
        # Greedy: the first 4 of the reference's 8 greedy tokens.
        self.assertTrue(streamed and REFERENCE["greedy"][0]["continuation"].startswith(streamed), streamed)


class ChatLogprobs(unittest.TestCase):
    def test_chat_logprobs_streamed_and_not(self):
        messages = [{"role": "user", "content": REFERENCE["prompts"][0]["text"]}]
        extra = {"thinking_enabled": False}
        answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=5, extra_body=extra)
        self.assertIsInstance(answer, ChatCompletion)
        content = answer.choices[0].logprobs.content
        self.assertEqual(len(content), answer.usage.completion_tokens)
        for token in content:
            self.assertEqual(len(token.top_logprobs), 5)
            # Greedy: each token is its position's likeliest.
            self.assertAlmostEqual(token.logprob, token.top_logprobs[0].logprob, places=5)
            if "\ufffd" not in token.token:
                self.assertEqual(bytes(token.bytes), token.token.encode("utf-8"))
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2, stream=True, extra_body=extra)
        streamed = [t for chunk in stream for choice in chunk.choices if choice.logprobs and choice.logprobs.content for t in choice.logprobs.content]
        self.assertEqual([t.token for t in streamed], [t.token for t in content])
        for a, b in zip(streamed, content):
            self.assertAlmostEqual(a.logprob, b.logprob, places=4)


if __name__ == "__main__":
    unittest.main(verbosity=2)
