import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * transcribe_audio on a recording longer than Whisper's 30-second window
 * reports its progress window by window, as MCP progress notifications.
 */

const SPEECH = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));

/** speech.wav (a 44-byte header, 16-bit mono PCM at 16 kHz) repeated to at least `seconds`. */
function longRecording(seconds: number): Buffer {
  const pcm = readFileSync(SPEECH).subarray(44);
  const repeats = Math.ceil((seconds * 16_000 * 2) / pcm.length);
  const data = Buffer.concat(Array.from({ length: repeats }, () => pcm));
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(16_000, 24);
  header.writeUInt32LE(32_000, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

describe('MCP transcription progress', () => {
  let server: TestServer;
  let client: Client;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1 }, server: { mcp: true } });
    await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
    client = new Client({ name: 'lserve-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)));
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    await server?.stop();
  });

  it('notifies progress window by window on a 70-second recording, up to its total', async () => {
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
