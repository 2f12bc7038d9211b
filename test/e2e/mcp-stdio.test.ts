import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { Engine } from '../../src/core/engine.js';
import { tinyEmbeddingModel } from '../fixtures/gguf/bert.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { cer } from '../fixtures/ocr/cer.js';
import { BIN } from '../helpers/cli.js';

/**
 * `lserve mcp` as an agent starts it (`… mcp add lserve -- npx lserve mcp`):
 * the built CLI spawned by the official SDK's StdioClientTransport, MCP on
 * stdin/stdout and nothing else there, logs on stderr. Over stdio, tools read
 * local file paths.
 */

const call = async (client: Client, name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as CallToolResult;
const textOf = (result: CallToolResult) => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

describe('lserve mcp (stdio)', () => {
  let dir: string;
  let client: Client;
  let transport: StdioClientTransport;
  const errors: Error[] = [];
  let stderr = '';

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-mcp-'));
    const home = path.join(dir, 'home');
    const store = new Engine({ home }).store;
    await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
    await store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
    await writeFile(path.join(dir, 'scan.png'), (await renderOneLine('Receipts are read offline.', 26)).png);
    transport = new StdioClientTransport({ command: process.execPath, args: [BIN, '--home', home, 'mcp', '--threads', '1'], stderr: 'pipe', env: { ...process.env, NO_COLOR: '1' } as Record<string, string> });
    transport.stderr?.on('data', (d: Buffer) => (stderr += d));
    client = new Client({ name: 'lserve-test', version: '1.0.0' });
    // A line on stdout that is not a JSON-RPC message is reported here.
    client.onerror = (error) => errors.push(error);
    await client.connect(transport);
  });

  afterAll(async () => {
    await client?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('lists the tools, path fields included', async () => {
    const { tools } = await client.listTools();
    expect(tools).toHaveLength(8);
    const ocr = tools.find((t) => t.name === 'read_text_in_image')!;
    expect(Object.keys(ocr.inputSchema.properties ?? {})).toContain('image_path');
    const asr = tools.find((t) => t.name === 'transcribe_audio')!;
    expect(Object.keys(asr.inputSchema.properties ?? {})).toContain('audio_path');
  });

  it('embeds texts and reads text from a local image file', async () => {
    const embedded = await call(client, 'embed_texts', { texts: ['hello world'] });
    expect(embedded.isError, textOf(embedded)).toBeFalsy();
    expect((embedded.structuredContent as { embeddings: number[][] }).embeddings[0]).toHaveLength(64);
    const read = await call(client, 'read_text_in_image', { image_path: path.join(dir, 'scan.png') });
    expect(read.isError, textOf(read)).toBeFalsy();
    expect(cer('Receipts are read offline.', (read.structuredContent as { text: string }).text)).toBeLessThanOrEqual(0.02);
    const missingFile = await call(client, 'read_text_in_image', { image_path: path.join(dir, 'nothing.png') });
    expect(missingFile.isError).toBe(true);
    expect(textOf(missingFile)).toContain('no such file');
  });

  it('a kind with no model installed is a tool error with the pull to run', async () => {
    const result = await call(client, 'ask_local_model', { prompt: 'hi' });
    expect(result.isError).toBe(true);
    expect(textOf(result)).toMatch(/No chat model is installed\. Run `lserve pull \S+`/);
    const models = await call(client, 'list_models', {});
    expect((models.structuredContent as { models: Array<{ id: string }> }).models.map((m) => m.id)).toContain('bge-test');
  });

  it('speak_text writes the audio to a new local file when asked, whole, and never over an existing one', async () => {
    const file = path.join(dir, 'reply.wav');
    const result = await call(client, 'speak_text', { text: 'Saved for later.', output_path: file });
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { path: string; duration: number; sample_rate: number };
    expect(body.path).toBe(file);
    const block = result.content.find((c) => c.type === 'audio') as { data: string };
    expect((await readFile(file)).equals(Buffer.from(block.data, 'base64'))).toBe(true);
    expect((await decodeAudio(await readFile(file), { sampleRate: body.sample_rate })).duration).toBeCloseTo(body.duration, 2);
    const again = await call(client, 'speak_text', { text: 'Something else.', output_path: file });
    expect(again.isError).toBe(true);
    expect(textOf(again)).toContain('already there');
    expect((await readFile(file)).equals(Buffer.from(block.data, 'base64'))).toBe(true);
    const missing = await call(client, 'speak_text', { text: 'x', output_path: path.join(dir, 'no-such-folder', 'a.wav') });
    expect(textOf(missing)).toContain('folder does not exist');
    // No temporary file is left behind.
    expect((await readdir(dir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });

  it('writes nothing but MCP to stdout', () => {
    expect(errors).toEqual([]);
    expect(stderr).not.toMatch(/jsonrpc/);
  });
});
