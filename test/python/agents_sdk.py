"""Coding agents' requests through the official Python SDKs, unmodified: `anthropic` for the Messages API, `openai` for
the Responses API.

Run by test/e2e/agents-python.test.ts against a started lserve serving the tiny random Qwen3 with its 40960-token
training context, registered without --ctx-size. The environment gives LSERVE_URL, LSERVE_MODEL, LSERVE_TOKENS
(Qwen3's special token ids, JSON) and LSERVE_REQUESTS: a JSON file with the agent-shaped first requests
(test/helpers/agent-requests.ts writes them, so both languages send the same). logit_bias (an lserve extension, sent
as extra_body) steers the random model where a test needs a given shape of output.
"""

import json
import os
import unittest

import anthropic
import openai

URL = os.environ["LSERVE_URL"]
MODEL = os.environ["LSERVE_MODEL"]
TOKENS = json.loads(os.environ["LSERVE_TOKENS"])
with open(os.environ["LSERVE_REQUESTS"], encoding="utf-8") as file:
    REQUESTS = json.load(file)

END = {str(TOKENS["imEnd"]): 100}
THINK = {"logit_bias": {str(TOKENS["think"]): 4.5, str(TOKENS["newline"]): 3, str(TOKENS["endThink"]): -100,
                        str(TOKENS["imEnd"]): -100, str(TOKENS["endOfText"]): -100},
         "presence_penalty": 2, "frequency_penalty": 2}

claude = anthropic.Anthropic(base_url=URL, api_key="unused", max_retries=0)
gpt = openai.OpenAI(base_url=f"{URL}/v1", api_key="unused", max_retries=0)

WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}}, "required": ["city"]},
}
QUESTION = {"role": "user", "content": "Weather in Paris?"}


class AnthropicSdk(unittest.TestCase):
    def test_forced_tool_use_and_result(self):
        message = claude.messages.create(model=MODEL, max_tokens=40, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
                                         messages=[QUESTION], extra_body={"temperature": 0})
        self.assertEqual(message.stop_reason, "tool_use")
        use = next(block for block in message.content if block.type == "tool_use")
        self.assertIn(use.input["city"], ["Paris", "London"])
        self.assertTrue(use.id.startswith("toolu_"))
        after = claude.messages.create(model=MODEL, max_tokens=2, tools=[WEATHER], messages=[
            QUESTION, {"role": "assistant", "content": message.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
        self.assertGreater(after.usage.input_tokens + (after.usage.cache_read_input_tokens or 0),
                           message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0))

    def test_streamed_tool_use(self):
        with claude.messages.stream(model=MODEL, max_tokens=40, tools=[WEATHER], tool_choice={"type": "any"}, messages=[QUESTION],
                                    extra_body={"temperature": 0}) as stream:
            deltas = [event.delta.type for event in stream if event.type == "content_block_delta"]
            final = stream.get_final_message()
        self.assertIn("input_json_delta", deltas)
        self.assertEqual(next(block for block in final.content if block.type == "tool_use").name, "get_weather")

    def test_adaptive_thinking_and_count_tokens(self):
        message = claude.messages.create(model=MODEL, max_tokens=6, thinking={"type": "adaptive", "display": "omitted"},
                                         output_config={"effort": "medium"}, messages=[QUESTION], extra_body={"temperature": 0, **THINK})
        thinking = next(block for block in message.content if block.type == "thinking")
        self.assertEqual(thinking.thinking, "")
        self.assertGreater(len(thinking.signature), 20)
        counted = claude.messages.count_tokens(model=MODEL, tools=[WEATHER], messages=[QUESTION, {"role": "system", "content": "Be brief."}])
        plain = claude.messages.count_tokens(model=MODEL, tools=[WEATHER], messages=[QUESTION])
        self.assertGreater(counted.input_tokens, plain.input_tokens)

    def test_agent_first_request(self):
        body = dict(REQUESTS["anthropic"])
        betas = body.pop("betas")
        body.pop("stream")
        with claude.beta.messages.stream(**body, betas=betas, extra_body={"logit_bias": END}) as stream:
            types = [event.type for event in stream]
            final = stream.get_final_message()
        self.assertEqual(types[0], "message_start")
        self.assertGreater(final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0), 10_000)


class OpenAiResponsesSdk(unittest.TestCase):
    def test_agent_first_request(self):
        body = dict(REQUESTS["responses"])
        # Codex's own field, which the SDK does not type: sent as the SDK sends any extra field.
        extra = {"logit_bias": END, "client_metadata": body.pop("client_metadata")}
        raw = gpt.responses.with_raw_response.create(**{**body, "stream": False}, extra_body=extra)
        self.assertEqual(raw.headers.get("lserve-omitted-tools"), "web_search")
        response = raw.parse()
        self.assertEqual(response.status, "completed")
        self.assertGreater(response.usage.input_tokens, 5_000)
        events = [event.type for event in gpt.responses.create(**body, extra_body=extra)]
        self.assertEqual(events[0], "response.created")
        self.assertEqual(events[-1], "response.completed")

    def test_encrypted_reasoning_round_trip(self):
        first = gpt.responses.create(model=MODEL, input="Think.", include=["reasoning.encrypted_content"], store=False,
                                     max_output_tokens=8, extra_body={"temperature": 0, **THINK})
        reasoning = next(item for item in first.output if item.type == "reasoning")
        self.assertTrue(reasoning.encrypted_content)
        weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}, "strict": False}

        def tokens(sealed):
            return gpt.responses.create(model=MODEL, store=False, tools=[weather], max_output_tokens=1, extra_body={"logit_bias": END}, input=[
                {"role": "user", "content": "Think."},
                {"type": "reasoning", "summary": [], "encrypted_content": sealed},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ]).usage.input_tokens

        self.assertGreater(tokens(reasoning.encrypted_content), tokens(reasoning.encrypted_content[:-4] + "AAAA"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
