"""The Responses API through the official Python `openai` package, unmodified.

Run by test/e2e/responses-python.test.ts against a started lserve serving the
synthetic chat fixture, whose details come in the environment: LSERVE_URL and
LSERVE_SMALL_URL (a server whose store takes no response over 1000 bytes),
LSERVE_MODEL, and LSERVE_TOKENS (Qwen3's special token ids, JSON). The model
has random weights: logit_bias (an lserve extension, sent as extra_body)
steers it where a test needs a given shape of output, as in the Node tests.

The SDK parses each streamed event into the pydantic class of its `type`;
every event is checked to be exactly that class, with no field the class does
not declare, and to validate against the SDK's event union.
"""

import json
import os
import typing
import unittest

import openai
import pydantic
from openai.types.responses import Response, ResponseStreamEvent

URL = os.environ["LSERVE_URL"]
SMALL_URL = os.environ["LSERVE_SMALL_URL"]
MODEL = os.environ["LSERVE_MODEL"]
TOKENS = json.loads(os.environ["LSERVE_TOKENS"])

# Bans both end-of-generation tokens: a generation runs to max_output_tokens.
NEVER_END = {str(TOKENS["imEnd"]): -100, str(TOKENS["endOfText"]): -100}
# Opens thinking and never closes it: the output is one reasoning item.
THINK_BIAS = {str(TOKENS["think"]): 4.5, str(TOKENS["newline"]): 3, str(TOKENS["endThink"]): -100, **NEVER_END}
# '"' in Qwen's vocabulary: favouring it ends a free string, which a random model never does by itself.
QUOTE = "1"

client = openai.OpenAI(base_url=f"{URL}/v1", api_key="unused", max_retries=0)
BASE = {"model": MODEL, "temperature": 0}

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}}, "required": ["city"]},
    "strict": True,
}

# The SDK's event union: each member class, by the literal of its `type` field.
_EVENT_UNION = typing.get_args(ResponseStreamEvent)[0]
EVENT_CLASSES = {typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in typing.get_args(_EVENT_UNION)}
EVENT_ADAPTER = pydantic.TypeAdapter(typing.Annotated[_EVENT_UNION, pydantic.Field(discriminator="type")])

# Every event type lserve streams: the streams below must show each at least once.
LSERVE_EVENTS = {
    "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed", "error",
    "response.output_item.added", "response.output_item.done", "response.content_part.added", "response.content_part.done",
    "response.output_text.delta", "response.output_text.done", "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
}
seen_events: set = set()


def collect(stream) -> list:
    """The stream's events, each checked against the SDK's own class for its type."""
    events = list(stream)
    for i, event in enumerate(events):
        assert event.type in EVENT_CLASSES, f"event type {event.type!r} is not one the SDK knows"
        assert type(event) is EVENT_CLASSES[event.type], f"{event.type} parsed as {type(event).__name__}"
        assert event.sequence_number == i, f"{event.type} numbered {event.sequence_number}, expected {i}"
        assert not event.model_extra, f"{event.type} has fields its SDK type lacks: {sorted(event.model_extra)}"
        # Parsing does not validate (the SDK constructs leniently): validating does, fields and nested response alike.
        assert type(EVENT_ADAPTER.validate_python(event.to_dict())) is type(event), event.type
        seen_events.add(event.type)
    return events


def text_of(events, kind: str, item_id=None) -> str:
    """The deltas of `kind` joined, of the item `item_id` when given (a turn may make several calls)."""
    return "".join(e.delta for e in events if e.type == f"response.{kind}.delta" and item_id in (None, e.item_id))


class Create(unittest.TestCase):
    def test_text_input(self):
        res = client.responses.create(**BASE, input="Say hello", max_output_tokens=5, store=False)
        self.assertIsInstance(res, Response)
        self.assertTrue(res.id.startswith("resp_"))
        self.assertEqual(res.object, "response")
        self.assertEqual(res.model, MODEL)
        self.assertIn(res.status, ("completed", "incomplete"))
        message = next(item for item in res.output if item.type == "message")
        self.assertTrue(message.id.startswith("msg_"))
        self.assertEqual(res.output_text, "".join(part.text for part in message.content if part.type == "output_text"))
        self.assertGreater(res.usage.input_tokens, 5)
        self.assertTrue(0 < res.usage.output_tokens <= 5)
        self.assertEqual(res.usage.total_tokens, res.usage.input_tokens + res.usage.output_tokens)
        with self.assertRaises(openai.NotFoundError):
            client.responses.retrieve(res.id)

    def test_items_and_instructions(self):
        short = client.responses.create(**BASE, input="hi", max_output_tokens=1, store=False)
        long = client.responses.create(
            **BASE,
            instructions="You are terse.",
            input=[
                {"type": "message", "role": "developer", "content": "Answer in English."},
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!", "annotations": []}], "id": "msg_1", "status": "completed"},
                {"type": "message", "role": "user", "content": "again"},
            ],
            max_output_tokens=1,
            store=False,
        )
        self.assertEqual(long.instructions, "You are terse.")
        self.assertGreater(long.usage.input_tokens, short.usage.input_tokens + 10)

    def test_max_output_tokens_is_incomplete(self):
        res = client.responses.create(**BASE, input="count", max_output_tokens=7, extra_body={"logit_bias": NEVER_END}, store=False)
        self.assertEqual(res.status, "incomplete")
        self.assertEqual(res.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(res.usage.output_tokens, 7)


class Stream(unittest.TestCase):
    def test_output_text(self):
        events = collect(client.responses.create(**BASE, input="stream please", max_output_tokens=6, stream=True, reasoning={"effort": "none"}, extra_body={"logit_bias": NEVER_END}))
        types = [e.type for e in events if not e.type.endswith(".delta")]
        self.assertEqual(types, [
            "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
            "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete",
        ])
        done = next(e for e in events if e.type == "response.output_text.done")
        self.assertEqual(done.text, text_of(events, "output_text"))
        self.assertEqual(events[-1].response.output_text, done.text)

    def test_reasoning_text(self):
        events = collect(client.responses.create(
            **BASE, input="think, then answer", max_output_tokens=30, stream=True,
            extra_body={"logit_bias": THINK_BIAS, "presence_penalty": 2, "frequency_penalty": 2},
        ))
        final = events[-1]
        self.assertEqual(final.type, "response.incomplete")
        reasoning = final.response.output[0]
        self.assertEqual(reasoning.type, "reasoning")
        self.assertEqual(reasoning.content[0].text, text_of(events, "reasoning_text"))
        self.assertEqual(final.response.usage.output_tokens, 30)

    def test_function_call_arguments(self):
        events = collect(client.responses.create(
            **BASE, input="Weather?", tools=[WEATHER_TOOL], tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=40, stream=True,
        ))
        done = next(e for e in events if e.type == "response.function_call_arguments.done")
        self.assertEqual(done.name, "get_weather")
        self.assertEqual(text_of(events, "function_call_arguments", done.item_id), done.arguments)
        self.assertEqual(events[-1].type, "response.completed")

    def test_custom_tool_call_input(self):
        events = collect(client.responses.create(
            **BASE, input="Run a command", tools=[{"type": "custom", "name": "shell", "description": "Runs a shell command"}],
            tool_choice="required", max_output_tokens=40, stream=True, extra_body={"logit_bias": {QUOTE: 10}},
        ))
        dones = [e for e in events if e.type == "response.custom_tool_call_input.done"]
        self.assertGreater(len(dones), 0)
        for done in dones:
            self.assertEqual(text_of(events, "custom_tool_call_input", done.item_id), done.input)
        final = events[-1]
        self.assertEqual(final.type, "response.completed")
        calls = [item for item in final.response.output if item.type == "custom_tool_call"]
        self.assertEqual([(c.id, c.name, c.input) for c in calls], [(d.item_id, "shell", d.input) for d in dones])

    def test_failure_after_the_stream_began(self):
        # This server's store takes no response this size: saving, the last step, fails.
        small = openai.OpenAI(base_url=f"{SMALL_URL}/v1", api_key="unused", max_retries=0)
        events = collect(small.responses.create(**BASE, input="hi", max_output_tokens=2, stream=True))
        self.assertEqual([e.type for e in events[-2:]], ["error", "response.failed"])
        self.assertEqual(events[-2].param, "store")
        self.assertEqual(events[-1].response.status, "failed")
        self.assertEqual(events[-1].response.error.code, "server_error")

    def test_stream_helper(self):
        # The SDK's higher-level helper accumulates the events into the final response, parsed with the given model.
        with client.responses.stream(**BASE, input="json please", text_format=Answer, max_output_tokens=60) as stream:
            deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
        self.assertEqual(final.output_text, deltas)
        self.assertEqual(Answer.model_validate_json(deltas), final.output_parsed)

    @classmethod
    def tearDownClass(cls):
        missing = LSERVE_EVENTS - seen_events
        assert not missing, f"event types never streamed: {sorted(missing)}"


class Tools(unittest.TestCase):
    def test_function_call_round_trip(self):
        first = client.responses.create(**BASE, input="Weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required", max_output_tokens=40)
        self.assertEqual(first.status, "completed")
        call = next(item for item in first.output if item.type == "function_call")
        self.assertTrue(call.id.startswith("fc_"))
        self.assertEqual(call.name, "get_weather")
        self.assertIn(json.loads(call.arguments)["city"], ("Paris", "London"))
        # The SDK's own output items go back as input, as its docs show.
        second = client.responses.create(
            **BASE, tools=[WEATHER_TOOL], max_output_tokens=4,
            input=[{"role": "user", "content": "Weather in Paris?"}, *first.output, {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 21}'}],
        )
        self.assertTrue(any(item.type == "message" for item in second.output))
        self.assertGreater(second.usage.input_tokens, first.usage.input_tokens)


class Answer(pydantic.BaseModel):
    ok: bool
    city: typing.Literal["Paris", "London"]


class StructuredOutput(unittest.TestCase):
    def test_parse_into_a_pydantic_model(self):
        # responses.parse sends the model's strict json_schema as text.format and parses the output with it.
        res = client.responses.parse(**BASE, input="json please", text_format=Answer, max_output_tokens=60)
        self.assertEqual(res.status, "completed")
        self.assertIsInstance(res.output_parsed, Answer)
        self.assertEqual(res.text.format.type, "json_schema")
        self.assertEqual(Answer.model_validate_json(res.output_text), res.output_parsed)


class StoredConversation(unittest.TestCase):
    def test_three_turns_retrieve_list_delete(self):
        one = client.responses.create(**BASE, input="My name is Ada.", max_output_tokens=3)
        two = client.responses.create(**BASE, input="What is my name?", previous_response_id=one.id, max_output_tokens=3)
        three = client.responses.create(
            **BASE, input=[{"role": "user", "content": "Again?"}, {"role": "user", "content": "Please."}], previous_response_id=two.id, max_output_tokens=3,
        )
        self.assertEqual(three.previous_response_id, two.id)
        # Each turn's prompt holds the turns before it.
        self.assertGreater(two.usage.input_tokens, one.usage.input_tokens + one.usage.output_tokens)
        self.assertGreater(three.usage.input_tokens, two.usage.input_tokens + two.usage.output_tokens)

        again = client.responses.retrieve(three.id)
        self.assertEqual(again.id, three.id)
        self.assertEqual(again.output, three.output)

        page1 = client.responses.input_items.list(three.id, limit=1, order="asc")
        self.assertEqual(len(page1.data), 1)
        self.assertTrue(page1.has_more)
        self.assertEqual(page1.data[0].content[0].text, "Again?")
        page2 = page1.get_next_page()
        self.assertEqual(page2.data[0].content[0].text, "Please.")
        self.assertFalse(page2.has_more)
        self.assertFalse(page2.has_next_page())
        # Auto-paging, newest first (the default order).
        ids = [item.id for item in client.responses.input_items.list(three.id, limit=1)]
        self.assertEqual(ids, [page2.data[0].id, page1.data[0].id])

        client.responses.delete(two.id)
        with self.assertRaises(openai.NotFoundError):
            client.responses.retrieve(two.id)
        with self.assertRaises(openai.NotFoundError):
            client.responses.delete(two.id)
        # The chain's newest link is still there.
        self.assertEqual(client.responses.retrieve(three.id).id, three.id)


if __name__ == "__main__":
    unittest.main(verbosity=2)
