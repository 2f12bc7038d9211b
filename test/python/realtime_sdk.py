"""The Realtime API through the official Python `openai` package, unmodified.

Run by test/e2e/realtime-python.test.ts against a started lserve serving the
synthetic chat fixture and a synthetic Piper voice: LSERVE_URL and
LSERVE_MODEL come in the environment. The SDK connects with
`client.realtime.connect(model=...)` to `websocket_base_url`, ws:// on the
local server. The model has random weights: answers are checked for their
events, order and status, not their words.

Every server event is checked to validate as the SDK's class for its `type`
(the RealtimeServerEvent union, discriminated by `type`), with no field the
class does not declare, but for the session's `id` and `object`: OpenAI's
server sends them in session.created / .updated, and the SDK types that
session as the request's shape, which has neither.
"""

import asyncio
import base64
import json
import os
import typing
import unittest

import openai
import pydantic
from openai.types.realtime import RealtimeServerEvent

URL = os.environ["LSERVE_URL"]
MODEL = os.environ["LSERVE_MODEL"]

EVENT_ADAPTER = pydantic.TypeAdapter(typing.Annotated[typing.get_args(RealtimeServerEvent)[0], pydantic.Field(discriminator="type")])


SESSION_EXTRAS = {"id", "object"}


def undeclared(value: typing.Any, path: str = "") -> list:
    """Fields of `value` (a parsed pydantic model, recursively) that its class does not declare."""
    found = []
    if isinstance(value, pydantic.BaseModel):
        for key in (value.model_extra or {}):
            if not (path == ".session" and key in SESSION_EXTRAS):
                found.append(f"{path}.{key}")
        for key in type(value).model_fields:
            found += undeclared(getattr(value, key), f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += undeclared(item, f"{path}[{i}]")
    return found


class RealtimeSdk(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = openai.AsyncOpenAI(base_url=f"{URL}/v1", websocket_base_url=f"{URL.replace('http', 'ws', 1)}/v1", api_key="unused", max_retries=0)

    async def until(self, connection, last: str) -> list:
        """Every event up to and including the first of type `last`, each validated against the SDK's classes."""
        events = []
        while True:
            raw = json.loads(await asyncio.wait_for(connection.recv_bytes(), timeout=60))
            event = EVENT_ADAPTER.validate_python(raw)
            self.assertEqual(event.type, raw["type"])
            self.assertEqual(undeclared(event), [], raw["type"])
            events.append(event)
            if event.type == last:
                return events

    def assertInOrder(self, types: list, expected: list) -> None:
        at = [types.index(t) if t in types else -1 for t in expected]
        self.assertNotIn(-1, at, f"missing from {types}")
        self.assertEqual(at, sorted(at), f"out of order in {types}")

    async def test_text_response(self) -> None:
        async with self.client.realtime.connect(model=MODEL) as connection:
            await self.until(connection, "session.created")
            await connection.session.update(session={"type": "realtime", "output_modalities": ["text"], "max_output_tokens": 8, "audio": {"input": {"turn_detection": None}}})
            updated = (await self.until(connection, "session.updated"))[-1]
            self.assertEqual(updated.session.output_modalities, ["text"])
            self.assertIsNone(updated.session.audio.input.turn_detection)
            await connection.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]})
            await connection.response.create()
            events = await self.until(connection, "response.done")
            types = [e.type for e in events]
            self.assertNotIn("error", types)
            self.assertInOrder(types, [
                "conversation.item.added", "conversation.item.done",
                "response.created", "response.output_item.added", "response.content_part.added",
                "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                "response.output_item.done", "response.done",
            ])
            done = events[-1]
            self.assertIn(done.response.status, ("completed", "incomplete"))
            self.assertGreater(done.response.usage.output_tokens, 0)
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            self.assertEqual(next(e for e in events if e.type == "response.output_text.done").text, text)
            message = done.response.output[0]
            self.assertEqual((message.type, message.role), ("message", "assistant"))
            self.assertEqual(message.content[0].text, text)

    async def test_audio_response(self) -> None:
        async with self.client.realtime.connect(model=MODEL) as connection:
            await self.until(connection, "session.created")
            await connection.session.update(session={"type": "realtime", "max_output_tokens": 12, "audio": {"input": {"turn_detection": None}, "output": {"voice": "marin"}}})
            await self.until(connection, "session.updated")
            await connection.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]})
            await connection.response.create()
            events = await self.until(connection, "response.done")
            types = [e.type for e in events]
            self.assertNotIn("error", types)
            self.assertInOrder(types, [
                "response.created", "response.output_item.added", "response.content_part.added",
                "response.output_audio_transcript.delta", "response.output_audio.delta", "response.output_audio.done",
                "response.output_audio_transcript.done", "response.content_part.done", "response.output_item.done", "response.done",
            ])
            self.assertIn(events[-1].response.status, ("completed", "incomplete"))
            audio = sum(len(base64.b64decode(e.delta)) for e in events if e.type == "response.output_audio.delta")
            self.assertGreater(audio, 2400)  # more than 50 ms of 24 kHz PCM16


if __name__ == "__main__":
    unittest.main(verbosity=2)
