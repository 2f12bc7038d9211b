import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { wavHeader } from '../../src/audio/encode/wav.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The MCP tools that make or read media, end to end on the suite's synthetic
 * Piper voice, Whisper export and SD-Turbo, through the official SDK's
 * client over Streamable HTTP: each answers what the HTTP API answers for
 * the same request; transcribe_audio on a recording longer than Whisper's
 * 30-second window reports its progress window by window.
 */

const SPEECH = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));

/** speech.wav (a 44-byte header, 16-bit mono PCM at 16 kHz) repeated to at least `seconds`. */
function longRecording(seconds: number): Buffer {
  const pcm = readFileSync(SPEECH).subarray(44);
  const data = Buffer.concat(Array.from({ length: Math.ceil((seconds * 16_000 * 2) / pcm.length) }, () => pcm));
  return Buffer.concat([wavHeader(16_000, data.length), data]);
}

describe('MCP media tools (serve --mcp)', () => {
  let server: TestServer;
  let client: Client;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1 }, server: { mcp: true } });
    await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
    await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
    await server.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'sd-test' });
    client = new Client({ name: 'lserve-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)));
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    await server?.stop();
  });

  const post = async (route: string, body: unknown) => fetch(`${server.url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const textOf = (result: CallToolResult) => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

  it('speak_text returns playable audio as an audio block, the samples the speech route gives', async () => {
    const progress: number[] = [];
    const result = (await client.callTool({ name: 'speak_text', arguments: { text: 'Hello from a local voice.' } }, undefined, { onprogress: (p) => progress.push(p.progress) })) as CallToolResult;
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { model: string; format: string; mime_type: string; sample_rate: number; duration: number };
    expect(body).toMatchObject({ model: 'piper-test', format: 'wav', mime_type: 'audio/wav' });
    const block = result.content.find((c) => c.type === 'audio') as { type: 'audio'; data: string; mimeType: string };
    expect(block.mimeType).toBe('audio/wav');
    const audio = await decodeAudio(Buffer.from(block.data, 'base64'), { sampleRate: body.sample_rate });
    expect(audio).toMatchObject({ format: 'wav', sourceSampleRate: body.sample_rate });
    expect(audio.duration).toBeCloseTo(body.duration, 2);
    expect(progress.length).toBeGreaterThan(0);
    const viaHttp = await post('/v1/audio/speech', { model: 'piper-test', input: 'Hello from a local voice.', response_format: 'wav' });
    expect(viaHttp.status).toBe(200);
    expect((await decodeAudio(Buffer.from(await viaHttp.arrayBuffer()), { sampleRate: body.sample_rate })).samples.length).toBe(audio.samples.length);
  });

  it('transcribe_audio transcribes base64 audio as the transcription route does', async () => {
    const speech = readFileSync(SPEECH);
    const result = (await client.callTool({ name: 'transcribe_audio', arguments: { audio_base64: speech.toString('base64'), language: 'en' } })) as CallToolResult;
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { model: string; text: string; language: string; duration: number };
    expect(body.model).toBe('whisper-test');
    expect(body.duration).toBeGreaterThan(0);
    const viaHttp = await post('/v1/audio/transcriptions', { model: 'whisper-test', audio: `data:audio/wav;base64,${speech.toString('base64')}`, language: 'en', temperature: 0 });
    expect(viaHttp.status).toBe(200);
    expect(body.text).toBe(((await viaHttp.json()) as { text: string }).text);
    // Over HTTP a tool takes no local path: the path field does not exist.
    const refused = (await client.callTool({ name: 'transcribe_audio', arguments: { audio_path: SPEECH } })) as CallToolResult;
    expect(refused.isError).toBe(true);
  });

  it('generate_image returns the image the generations route makes for the same seed, with a progress notification per step', async () => {
    const progress: Array<{ progress: number; total?: number }> = [];
    const args = { prompt: 'a red fox in the snow', size: '64x64', steps: 2, seed: 7 };
    const result = (await client.callTool({ name: 'generate_image', arguments: args }, undefined, { onprogress: (p) => progress.push(p) })) as CallToolResult;
    expect(result.isError, textOf(result)).toBeFalsy();
    expect(result.structuredContent).toMatchObject({ model: 'sd-test', width: 64, height: 64, seed: 7, format: 'png' });
    const block = result.content.find((c) => c.type === 'image') as { type: 'image'; data: string; mimeType: string };
    expect(block.mimeType).toBe('image/png');
    const png = Buffer.from(block.data, 'base64');
    expect(await sharp(png).metadata()).toMatchObject({ width: 64, height: 64, format: 'png' });
    // From the start (step 0) to the last step.
    expect(progress.map((p) => p.progress)).toEqual([0, 1, 2]);
    expect(progress.every((p) => p.total === 2)).toBe(true);
    const viaHttp = await post('/v1/images/generations', { model: 'sd-test', prompt: args.prompt, size: args.size, steps: 2, seed: 7, response_format: 'b64_json' });
    expect(viaHttp.status).toBe(200);
    const http = (await viaHttp.json()) as { data: Array<{ b64_json: string }> };
    const [ours, theirs] = await Promise.all([png, Buffer.from(http.data[0]!.b64_json, 'base64')].map((b) => sharp(b).raw().toBuffer()));
    expect(ours!.equals(theirs!)).toBe(true);
  });

  it('transcribe_audio notifies progress window by window on a 70-second recording, up to its total', async () => {
    const progress: Array<{ progress: number; total?: number }> = [];
    const result = (await client.callTool(
      { name: 'transcribe_audio', arguments: { audio_base64: longRecording(70).toString('base64'), language: 'en' } },
      undefined,
      { onprogress: (p) => progress.push(p), timeout: 120_000 },
    )) as CallToolResult;
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    expect((result.structuredContent as { duration: number }).duration).toBeGreaterThanOrEqual(70);
    expect(progress.length).toBeGreaterThanOrEqual(2);
    const values = progress.map((p) => p.progress);
    expect(values).toEqual([...values].sort((a, b) => a - b));
    expect(progress.at(-1)!.progress).toBe(progress.at(-1)!.total);
  }, 180_000);
});
