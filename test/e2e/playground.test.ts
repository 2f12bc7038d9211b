import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { renderPage } from '../fixtures/ocr/corpus.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { tinyZipformerModel } from '../fixtures/onnx/zipformer.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { writeProjectorGguf, writeTextModelGguf } from '../fixtures/gguf/mmproj.js';
import { CHAT_MODEL_ID, NEVER_END, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';
import { startMirror, testBytes, writeCatalog, type Mirror } from '../helpers/hf-mirror.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The playground in a real browser: headless Chromium (Debian's `chromium`
 * package, or CHROMIUM_PATH) driven by playwright-core against the real
 * server on the synthetic models. Every panel does its job end to end through
 * the public API — chat streams (reasoning folded, stop; by chat completions
 * or the Responses API; pictures attached for a model that takes them), a file and the fake microphone (Chromium plays a WAV
 * as its capture device) transcribe, speech
 * plays while it streams in all three voice modes, a spoken conversation
 * over the Realtime API is heard and answered aloud, images generate, an edit
 * with a mask painted by the mouse comes back, OCR draws its boxes, a pull
 * shows its progress and the model appears (then goes) — and a screenshot of
 * each panel is written to test/.artifacts/.
 */

/*
 * The callbacks handed to page.evaluate run in the page. This project's
 * tsconfig has no DOM library (its code runs on Node), so the few browser
 * names those callbacks use are declared here, loosely typed.
 */
declare const document: any;
declare const window: any;
declare const MutationObserver: any;
declare const navigator: any;
declare const AudioContext: any;
type HTMLElement = any;
type HTMLCanvasElement = any;
type HTMLImageElement = any;
type HTMLProgressElement = any;
type HTMLAudioElement = any;
type HTMLDetailsElement = any;

const ARTIFACTS = fileURLToPath(new URL('../.artifacts/', import.meta.url));
const SPEECH_WAV = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));
const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));
const REPO = 'test-org/playground';

/** The browser to drive: CHROMIUM_PATH, else the first Chromium or Chrome on PATH. */
function findChromium(): string | undefined {
  if (process.env.CHROMIUM_PATH) return existsSync(process.env.CHROMIUM_PATH) ? process.env.CHROMIUM_PATH : undefined;
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  for (const name of ['chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable']) {
    for (const dir of dirs) if (existsSync(path.join(dir, name))) return path.join(dir, name);
  }
  return undefined;
}

const chromiumPath = findChromium();
if (!chromiumPath) {
  console.warn(
    'playground.test.ts: SKIPPED — no Chromium found. Install Debian\'s `chromium` package (apt-get install chromium; .ci/run does) or set CHROMIUM_PATH to a Chromium/Chrome binary.',
  );
}

describe.skipIf(!chromiumPath)('the playground in headless Chromium', () => {
  let mirror: Mirror;
  let dir: string;
  let server: TestServer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const problems: string[] = [];
  const previousEndpoint = process.env.HF_ENDPOINT;

  beforeAll(async () => {
    await mkdir(ARTIFACTS, { recursive: true });
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-playground-'));
    mirror = await startMirror();
    process.env.HF_ENDPOINT = mirror.endpoint;
    // 1.2 MB at 300 kB/s: a pull long enough to watch its bar move.
    const file = await mirror.put(REPO, 'model.onnx', testBytes(1_200_000, 9), { linkedEtag: true, bytesPerSecond: 300_000 });
    const real = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)).entries;
    const catalog = await writeCatalog(dir, [
      ...real,
      { id: 'tiny-pull', kind: 'asr', backend: 'onnx', description: 'a small test download', owned_by: 'test', license: 'mit', files: { model: { repo: REPO, path: 'model.onnx', size: file.size } } },
    ]);
    server = await startTestServer({ engine: { catalogPath: catalog, threads: 1 } });
    const store = server.engine.store;
    const { tinyQwen3TtsModel } = await import('../fixtures/onnx/qwen3-tts.js');
    await store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    // A Qwen2-VL with its projector: /v1/models lists it as taking images.
    await store.registerLocal(golden('model.gguf'), { kind: 'chat', id: 'qwen2-vl-tiny', mmproj: golden('mmproj.gguf') });
    // Headers only, listed as taking images and audio: never sent a request (it could not load).
    writeTextModelGguf(path.join(dir, 'omni.gguf'), 'qwen2vl', 2048);
    writeProjectorGguf(path.join(dir, 'omni-mmproj.gguf'), { vision: true, audio: true, width: 2048 });
    await store.registerLocal(path.join(dir, 'omni.gguf'), { kind: 'chat', id: 'omni-listed', mmproj: path.join(dir, 'omni-mmproj.gguf') });
    await store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
    await store.registerDirectory(await tinyZipformerModel(), { kind: 'asr-stream', id: 'zipformer-test' });
    await store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
    await store.registerDirectory(await tinyQwen3TtsModel('voicedesign'), { kind: 'tts', id: 'qwen-design' });
    await store.registerDirectory(await tinyQwen3TtsModel('base'), { kind: 'tts', id: 'qwen-clone' });
    await store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'sd-test' });

    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: chromiumPath,
      args: [
        // A fake microphone that plays speech.wav (in a loop), allowed without a prompt.
        '--use-fake-device-for-media-stream',
        '--use-fake-ui-for-media-stream',
        `--use-file-for-fake-audio-capture=${SPEECH_WAV}`,
        '--autoplay-policy=no-user-gesture-required',
      ],
    });
    context = await browser.newContext({ viewport: { width: 1280, height: 820 }, colorScheme: 'light' });
    await context.grantPermissions(['microphone', 'clipboard-read', 'clipboard-write'], { origin: server.url });
    page = await context.newPage();
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      // A refused request is the API answering (shown in the page); anything else is a fault of the page.
      if (message.type() === 'error' && !/Failed to load resource/.test(message.text())) problems.push(`console: ${message.text()}`);
    });
    await page.goto(`${server.url}/`);
    await page.waitForSelector('body[data-ready="true"]');
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
    await mirror?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    if (previousEndpoint === undefined) delete process.env.HF_ENDPOINT;
    else process.env.HF_ENDPOINT = previousEndpoint;
  });

  const open = async (panel: string) => {
    await page.click(`#nav a[data-panel="${panel}"]`);
    await page.waitForSelector(`#panel-${panel}:not([hidden])`);
  };
  const shot = (panel: string) => page.screenshot({ path: path.join(ARTIFACTS, `playground-${panel}.png`) });
  /** Records every text `selector` shows from now on (to see progress that passes). */
  const watchText = (selector: string) =>
    page.evaluate((sel) => {
      const seen: string[] = [];
      const node = document.querySelector(sel)!;
      new MutationObserver(() => seen.push(node.textContent ?? '')).observe(node, { subtree: true, childList: true, characterData: true });
      (window as unknown as Record<string, string[]>)[`seen:${sel}`] = seen;
    }, selector);
  const seenText = (selector: string) => page.evaluate((sel) => (window as unknown as Record<string, string[]>)[`seen:${sel}`]!, selector);

  it('loads from the server itself, same-origin under its CSP, and connects', async () => {
    expect(await page.textContent('#server-status')).toMatch(/connected · \d+ models/);
    expect(await page.title()).toBe('lserve · Chat');
  });

  it('chat: streams the answer, shows the reasoning folded, and stops on demand', async () => {
    await open('chat');
    await page.selectOption('#chat-model', CHAT_MODEL_ID);
    await page.fill('#chat-system', 'You are terse.');
    await page.fill('#chat-max-tokens', '24');
    await page.fill('#chat-temperature', '0');
    await page.selectOption('#chat-thinking', 'on');
    await page.fill('#chat-thinking-tokens', '3');
    // The random-weight model thinks only when steered: the extra-fields box passes logit_bias through.
    await page.fill('#chat-extra', JSON.stringify({ logit_bias: { [TOKENS.think]: 4.5, [TOKENS.newline]: 3, [TOKENS.endThink]: -100, ...NEVER_END }, presence_penalty: 2, frequency_penalty: 2 }));
    await watchText('#chat-log');
    await page.fill('#chat-input', 'Why is the sky blue?');
    await page.press('#chat-input', 'Enter');
    const answer = page.locator('.msg.assistant').last();
    await answer.and(page.locator('[data-done]')).waitFor({ timeout: 30_000 });
    const content = (await answer.locator('.content').textContent()) ?? '';
    expect(content.length).toBeGreaterThan(0);
    // Streamed: the log showed the answer growing, not all at once.
    const lengths = new Set((await seenText('#chat-log')).map((t) => t.length));
    expect(lengths.size).toBeGreaterThan(4);
    const reasoning = answer.locator('details.reasoning');
    expect(await reasoning.count()).toBe(1);
    expect(await reasoning.evaluate((d) => (d as HTMLDetailsElement).open)).toBe(false);
    expect(((await reasoning.locator('.text').textContent()) ?? '').length).toBeGreaterThan(0);
    expect(await answer.locator('.meta').textContent()).toMatch(/tokens/);

    // Stop: a long answer is cut when the button is pressed.
    await page.fill('#chat-extra', JSON.stringify({ logit_bias: NEVER_END }));
    await page.selectOption('#chat-thinking', 'off');
    await page.fill('#chat-max-tokens', '4000');
    await page.fill('#chat-input', 'Tell me a long story.');
    await page.click('#chat-send');
    await page.waitForFunction(() => (document.querySelector('.msg.assistant:last-child .content')?.textContent ?? '').length > 5);
    await page.click('#chat-stop');
    await page.locator('.msg.assistant:last-child[data-done]').waitFor({ timeout: 10_000 });
    expect(await page.textContent('#chat-status')).toBe('stopped');
    expect(await page.isDisabled('#chat-stop')).toBe(true);
    await page.click('.msg.assistant >> nth=0 >> details.reasoning summary');
    await shot('chat');
  }, 60_000);

  it('chat: token probabilities colour each answer token and show its alternatives', async () => {
    await open('chat');
    await page.click('#chat-clear');
    await page.selectOption('#chat-model', CHAT_MODEL_ID);
    await page.selectOption('#chat-thinking', 'off');
    await page.fill('#chat-max-tokens', '6');
    await page.fill('#chat-temperature', '0');
    await page.fill('#chat-extra', JSON.stringify({ logit_bias: NEVER_END }));
    await page.check('#chat-probabilities');
    await page.fill('#chat-input', 'Count with me.');
    await page.press('#chat-input', 'Enter');
    const answer = page.locator('.msg.assistant').last();
    await answer.and(page.locator('[data-done]')).waitFor({ timeout: 30_000 });
    const tokens = answer.locator('.content .token');
    expect(await tokens.count()).toBe(6);
    const seen = await tokens.evaluateAll((spans) => (spans as HTMLElement[]).map((s: HTMLElement) => ({ text: s.textContent as string, title: s.getAttribute('title') as string, p: Number(s.dataset.p) })));
    expect(seen.map((t) => t.text).join('')).toBe(await answer.locator('.content').textContent());
    for (const token of seen) {
      expect(token.p).toBeGreaterThan(0);
      expect(token.p).toBeLessThanOrEqual(1);
      // Its own probability, then the five likeliest alternatives.
      expect(token.title!.split('\n')).toHaveLength(6);
    }
    await page.uncheck('#chat-probabilities');
    await page.fill('#chat-extra', '');
  }, 60_000);

  it('chat over the Responses API: each turn streams from /v1/responses and continues the last response by its id', async () => {
    const sent: Array<Record<string, unknown>> = [];
    const onRequest = (request: import('playwright-core').Request) => {
      if (request.method() === 'POST' && new URL(request.url()).pathname === '/v1/responses') sent.push(request.postDataJSON() as Record<string, unknown>);
    };
    page.on('request', onRequest);
    try {
      await open('chat');
      await page.click('#chat-clear');
      await page.check('#chat-responses');
      expect(await page.isDisabled('#chat-seed')).toBe(true);
      await page.selectOption('#chat-thinking', 'on');
      await page.fill('#chat-thinking-tokens', '3');
      await page.fill('#chat-max-tokens', '24');
      await page.fill('#chat-extra', JSON.stringify({ logit_bias: { [TOKENS.think]: 4.5, [TOKENS.newline]: 3, [TOKENS.endThink]: -100, ...NEVER_END }, presence_penalty: 2, frequency_penalty: 2 }));
      await watchText('#chat-log');
      /** Sends a message and returns what the panel shows for it: the answer, its reasoning, and the response line. */
      const turn = async (text: string, nth: number) => {
        await page.fill('#chat-input', text);
        await page.press('#chat-input', 'Enter');
        const answer = page.locator('.msg.assistant').nth(nth);
        await answer.and(page.locator('[data-done]')).waitFor({ timeout: 30_000 });
        return {
          content: (await answer.locator('.content').textContent()) ?? '',
          reasoning: await answer.locator('details.reasoning .text').allTextContents(),
          shown: (await page.textContent('#chat-response')) ?? '',
        };
      };
      const stored = async (id: string) => (await (await fetch(`${server.url}/v1/responses/${id}`)).json()) as {
        previous_response_id: string | null;
        output: Array<{ type: string; content: Array<{ text: string }> }>;
      };
      const textOf = (response: Awaited<ReturnType<typeof stored>>, type: string) => response.output.find((item) => item.type === type)?.content[0]?.text;

      const one = await turn('My name is Ada.', 0);
      const firstId = /^response (resp_\S+)$/.exec(one.shown)?.[1];
      expect(firstId, one.shown).toBeDefined();
      expect(sent).toHaveLength(1);
      expect(sent[0]).toMatchObject({ model: CHAT_MODEL_ID, stream: true, input: 'My name is Ada.', max_output_tokens: 24, thinking_enabled: true });
      expect(sent[0]).not.toHaveProperty('previous_response_id');
      expect(sent[0]).not.toHaveProperty('messages');
      // What the panel shows is what the server stored under the shown id, and it streamed in.
      const first = await stored(firstId!);
      expect(first.previous_response_id).toBeNull();
      expect(one.content.length).toBeGreaterThan(0);
      expect(one.content).toBe(textOf(first, 'message'));
      expect(one.reasoning).toEqual([textOf(first, 'reasoning')]);
      expect(one.reasoning[0]!.length).toBeGreaterThan(0);
      expect(new Set((await seenText('#chat-log')).map((t) => t.length)).size).toBeGreaterThan(4);

      const two = await turn('What is my name?', 1);
      const secondId = /^response (resp_\S+)$/.exec(two.shown)?.[1];
      expect(secondId).toBeDefined();
      expect(secondId).not.toBe(firstId);
      expect(sent).toHaveLength(2);
      // Only the new message: the conversation is carried by the id.
      expect(sent[1]).toMatchObject({ input: 'What is my name?', previous_response_id: firstId });
      const second = await stored(secondId!);
      expect(second.previous_response_id).toBe(firstId);
      expect(two.content).toBe(textOf(second, 'message'));

      // Clear starts over: the id is forgotten and the next turn continues nothing.
      await page.click('#chat-clear');
      expect(await page.textContent('#chat-response')).toBe('');
      const again = await turn('Hello again.', 0);
      expect(sent).toHaveLength(3);
      expect(sent[2]).toMatchObject({ input: 'Hello again.' });
      expect(sent[2]).not.toHaveProperty('previous_response_id');

      // Switched off and on, the server's conversation would miss what went the other way: the next turn sends the history.
      await page.uncheck('#chat-responses');
      await page.check('#chat-responses');
      expect(await page.textContent('#chat-response')).toBe('');
      await turn('And again.', 1);
      expect(sent).toHaveLength(4);
      expect(sent[3]!.input).toEqual([
        { role: 'user', content: 'Hello again.' },
        { role: 'assistant', content: again.content },
        { role: 'user', content: 'And again.' },
      ]);
      expect(sent[3]).not.toHaveProperty('previous_response_id');
    } finally {
      page.off('request', onRequest);
      await page.uncheck('#chat-responses');
    }
  }, 90_000);

  it("chat attachments: offered by the model's input_modalities; a picked and a pasted picture, one removed, the other sent as an image_url part; a dropped clip's chip", async () => {
    const sent: Array<{ messages: Array<{ role: string; content: unknown }> }> = [];
    const answered: Array<{ status: number; error?: string }> = [];
    const onRequest = (request: import('playwright-core').Request) => {
      if (request.method() === 'POST' && new URL(request.url()).pathname === '/v1/chat/completions') sent.push(request.postDataJSON() as (typeof sent)[number]);
    };
    const onResponse = async (response: import('playwright-core').Response) => {
      if (response.request().method() !== 'POST' || new URL(response.url()).pathname !== '/v1/chat/completions') return;
      answered.push({ status: response.status(), error: response.ok() ? undefined : ((await response.json()) as { error: { message: string } }).error.message });
    };
    page.on('request', onRequest);
    page.on('response', onResponse);
    try {
      await open('chat');
      await page.click('#chat-clear');
      await page.fill('#chat-system', '');
      await page.fill('#chat-extra', '');
      await page.fill('#chat-max-tokens', '4');
      // A text-only model: no attaching, and the tooltip says why.
      await page.selectOption('#chat-model', CHAT_MODEL_ID);
      expect(await page.isDisabled('#chat-attach')).toBe(true);
      expect(await page.getAttribute('#chat-attach-tip', 'title')).toBe(`${CHAT_MODEL_ID} takes text only`);

      await page.selectOption('#chat-model', 'qwen2-vl-tiny');
      expect(await page.isDisabled('#chat-attach')).toBe(false);
      expect(await page.getAttribute('#chat-attach-tip', 'title')).toMatch(/^Attach image /);
      expect(await page.getAttribute('#chat-file', 'accept')).toBe('image/*');
      // Audio is refused for it, with the reason; so is a file that is no picture.
      const note = path.join(dir, 'note.txt');
      await writeFile(note, 'not a picture');
      await page.setInputFiles('#chat-file', note);
      await page.locator('#chat-status[data-kind="error"]').waitFor();
      expect(await page.textContent('#chat-status')).toBe('note.txt is neither an image nor a WAV or MP3 clip.');
      await page.setInputFiles('#chat-file', SPEECH_WAV);
      await page.waitForFunction(() => /cannot read audio/.test(document.querySelector('#chat-status')?.textContent ?? ''));
      expect(await page.textContent('#chat-status')).toBe('qwen2-vl-tiny cannot read audio (it takes image): remove them, or clear the chat if earlier turns carry them, or pick a model that takes audio.');
      expect(await page.isHidden('#chat-attachments')).toBe(true);

      const picked = await sharp({ create: { width: 16, height: 12, channels: 3, background: '#3366cc' } }).png().toBuffer();
      const file = path.join(dir, 'blue.png');
      await writeFile(file, picked);
      await page.setInputFiles('#chat-file', file);
      await page.locator('#chat-attachments .attachment img').waitFor();
      expect(await page.textContent('#chat-status')).toBe('');
      // Pasted into the message box: a second one.
      const pasted = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#cc3333' } }).png().toBuffer();
      await page.evaluate((base64) => {
        const bytes = Uint8Array.from(atob(base64), (c: string) => c.charCodeAt(0));
        const data = new window.DataTransfer();
        data.items.add(new window.File([bytes], 'red.png', { type: 'image/png' }));
        document.querySelector('#chat-input').dispatchEvent(new window.ClipboardEvent('paste', { clipboardData: data, bubbles: true, cancelable: true }));
      }, pasted.toString('base64'));
      await page.locator('#chat-attachments .attachment >> nth=1').waitFor();
      expect(await page.locator('#chat-attachments img').evaluateAll((imgs) => imgs.map((i) => (i as HTMLImageElement).alt))).toEqual(['blue.png', 'red.png']);
      await shot('chat-attachments');
      await page.click('#chat-attachments button[aria-label="remove red.png"]');
      expect(await page.locator('#chat-attachments .attachment').count()).toBe(1);

      await page.fill('#chat-input', 'What colour is this?');
      await page.press('#chat-input', 'Enter');
      await page.locator('.msg.assistant[data-done]').waitFor({ timeout: 30_000 });
      const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${picked.toString('base64')}` } };
      expect(sent).toHaveLength(1);
      expect(sent[0]!.messages).toEqual([{ role: 'user', content: [{ type: 'text', text: 'What colour is this?' }, image] }]);
      // The tray emptied into the message; its bubble shows the picture.
      expect(await page.isHidden('#chat-attachments')).toBe(true);
      expect(await page.getAttribute('.msg.user .attachments img', 'src')).toBe(image.image_url.url);
      expect(answered).toHaveLength(1);
      const answer = page.locator('.msg.assistant');
      if (answered[0]!.status !== 200) {
        // A build without the media runtime refuses it: the panel shows the server's message.
        expect(answered[0]!.status).toBe(400);
        expect(await answer.getAttribute('class')).toContain('error');
        expect(await answer.locator('.content').textContent()).toBe(answered[0]!.error);
        expect(await page.textContent('#chat-status')).toBe(answered[0]!.error);
      } else {
        // Answered: the next turn resends the picture with the conversation.
        expect(((await answer.locator('.content').textContent()) ?? '').length).toBeGreaterThan(0);
        await page.fill('#chat-input', 'Are you sure?');
        await page.press('#chat-input', 'Enter');
        await page.locator('.msg.assistant >> nth=1').and(page.locator('[data-done]')).waitFor({ timeout: 30_000 });
        expect(sent[1]!.messages[0]).toEqual(sent[0]!.messages[0]);
        expect(sent[1]!.messages.at(-1)).toEqual({ role: 'user', content: 'Are you sure?' });
      }

      // A model that takes audio: a clip dropped onto the chat shows as a chip with its name and length.
      await page.click('#chat-clear');
      await page.selectOption('#chat-model', 'omni-listed');
      expect(await page.getAttribute('#chat-file', 'accept')).toBe('image/*,audio/wav,audio/mpeg,.wav,.mp3');
      await page.evaluate((base64) => {
        const bytes = Uint8Array.from(atob(base64), (c: string) => c.charCodeAt(0));
        const data = new window.DataTransfer();
        data.items.add(new window.File([bytes], 'speech.wav', { type: 'audio/wav' }));
        document.querySelector('#chat-log').dispatchEvent(new window.DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
      }, (await readFile(SPEECH_WAV)).toString('base64'));
      // speech.wav is 4.19 s long.
      await page.waitForFunction(() => document.querySelector('#chat-attachments .attachment span')?.textContent === '♪ speech.wav · 0:04.2');
      // Switched to a text-only model, it cannot go: the reason shows and nothing is sent.
      const requests = sent.length;
      await page.selectOption('#chat-model', CHAT_MODEL_ID);
      expect(await page.isDisabled('#chat-attach')).toBe(true);
      await page.fill('#chat-input', 'Hear this?');
      await page.press('#chat-input', 'Enter');
      expect(await page.textContent('#chat-status')).toMatch(new RegExp(`^${CHAT_MODEL_ID} cannot read audio \\(it takes text only\\)`));
      expect(await page.inputValue('#chat-input')).toBe('Hear this?');
      expect(sent).toHaveLength(requests);
      await page.click('#chat-attachments button[aria-label="remove speech.wav"]');
      expect(await page.isHidden('#chat-attachments')).toBe(true);
      await page.fill('#chat-input', '');
    } finally {
      page.off('request', onRequest);
      page.off('response', onResponse);
      await page.click('#chat-clear');
    }
  }, 60_000);

  it('speech to text: a file gives text (with segments), the fake microphone gives live text over the WebSocket', async () => {
    await open('transcribe');
    await page.selectOption('#stt-model', 'whisper-test');
    await page.setInputFiles('#stt-file', SPEECH_WAV);
    await page.click('#stt-run');
    await page.locator('#stt-status[data-kind="ok"]').waitFor({ timeout: 30_000 });
    expect(await page.textContent('#stt-meta')).toMatch(/\d\.\d s of audio/);
    expect(((await page.textContent('#stt-text')) ?? '').length).toBeGreaterThan(0);

    await page.selectOption('#stt-live-model', 'zipformer-test');
    await watchText('#stt-partial');
    await page.click('#stt-mic');
    await page.waitForFunction(() => document.querySelector('#stt-live-status')?.textContent === 'listening…', undefined, { timeout: 20_000 });
    // speech.wav has two phrases with pauses: a final comes at a pause.
    await page.locator('#stt-segments tbody tr').first().waitFor({ timeout: 20_000 });
    // The meter shows 4 × the RMS of each captured chunk: speech.wav's speech is 0.05–0.13 RMS (≥ 0.2 on the
    // meter), its pauses are digital silence (0). It loops, so the speech comes round again within 5 s.
    await page.waitForFunction(() => Number((document.querySelector('#stt-level') as HTMLProgressElement).value) > 0.1, undefined, { timeout: 10_000 });
    await page.click('#stt-mic');
    await page.locator('#stt-live-status[data-kind="ok"]').waitFor({ timeout: 20_000 });
    expect(await page.evaluate(() => Number((document.querySelector('#stt-level') as HTMLProgressElement).value))).toBe(0);
    expect(await page.textContent('#stt-live-status')).toMatch(/^done · \d+ segments?$/);
    expect(((await page.textContent('#stt-text')) ?? '').trim().length).toBeGreaterThan(0);
    expect((await seenText('#stt-partial')).some((t) => t.trim().length > 0)).toBe(true);
    expect(await page.textContent('#stt-segments tbody tr td.num')).toMatch(/^\d:\d\d\.\d$/);
    await shot('transcribe');
  }, 60_000);

  it('text to speech: plays while it streams, with a preset voice, a designed voice and a recorded clone', async () => {
    await open('speech');
    // Of the three speech models, the picker starts at the server's default.
    const listed = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; kind: string; default?: true }> };
    expect(listed.data.filter((m) => m.kind === 'tts').length).toBeGreaterThan(1);
    expect(await page.inputValue('#tts-model')).toBe(listed.data.find((m) => m.kind === 'tts' && m.default)!.id);
    const speakAndWait = async () => {
      await page.evaluate(() => {
        const panel = document.querySelector('#panel-speech') as HTMLElement;
        delete panel.dataset.played;
        delete panel.dataset.received;
        (window as unknown as { playingBeforeEnd: boolean | undefined }).playingBeforeEnd = undefined;
        new MutationObserver((_: unknown, observer: { disconnect(): void }) => {
          if (panel.dataset.playing) {
            // Audio was playing before the stream was over (the finished file is shown only at its end).
            (window as unknown as { playingBeforeEnd: boolean }).playingBeforeEnd = (document.querySelector('#tts-audio') as HTMLAudioElement).hidden;
            observer.disconnect();
          }
        }).observe(panel, { attributes: true });
      });
      await page.click('#tts-speak');
      await page.locator('#panel-speech[data-played]').waitFor({ timeout: 40_000 });
      expect(Number(await page.getAttribute('#panel-speech', 'data-played'))).toBeGreaterThan(0.1);
      expect(await page.evaluate(() => (window as unknown as { playingBeforeEnd: boolean }).playingBeforeEnd)).toBe(true);
      expect(await page.getAttribute('#tts-audio', 'src')).toMatch(/^blob:/);
      expect(await page.textContent('#tts-status')).toMatch(/^played \d+\.\d s$/);
    };

    await page.selectOption('#tts-model', 'piper-test');
    await page.waitForFunction(() => (document.querySelector('#tts-mode')?.textContent ?? '') === 'preset voices');
    await speakAndWait();

    await page.selectOption('#tts-model', 'qwen-design');
    await page.waitForFunction(() => document.querySelector('#tts-mode')?.textContent === 'voice design');
    await page.fill('#tts-instructions', 'A calm, low voice.');
    await page.fill('#tts-input', 'Hello there.');
    await speakAndWait();

    await page.selectOption('#tts-model', 'qwen-clone');
    await page.waitForFunction(() => document.querySelector('#tts-mode')?.textContent === 'voice clone');
    await page.click('#tts-ref-record');
    await page.waitForTimeout(1500);
    await page.click('#tts-ref-record');
    expect(await page.textContent('#tts-ref-name')).toMatch(/^recording · 1\.\d s$/);
    await page.fill('#tts-ref-text', 'hello world');
    await speakAndWait();
    await shot('speech');
  }, 90_000);

  it('voice: a spoken conversation over the Realtime API; turns transcribed, answers played as they stream, an answer cut by speaking over it', async () => {
    // A realtime session speaks with the default speech model (the API names none): this server has three, and the panel names the one the server picked.
    const listed = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; kind: string; default?: true }> };
    const defaultTts = listed.data.filter((m) => m.kind === 'tts' && m.default);
    expect(defaultTts).toHaveLength(1);
    await open('voice');
    await page.waitForFunction((id) => document.querySelector('#voice-voice-note')?.textContent === `spoken by ${id}, the default speech model`, defaultTts[0]!.id);
    // Its own server, then, with one speech model.
    const voiced = await startTestServer({ engine: { threads: 1 } });
    await voiced.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    await voiced.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
    await voiced.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
    // The first phrase of speech.wav (its speech is 0.5 to 1.3 s), to start at once.
    const phrase = Array.from((await decodeAudio(await readFile(SPEECH_WAV), { sampleRate: 16_000 })).samples.subarray(0.4 * 16_000, 1.4 * 16_000));
    const other = await browser.newContext({ viewport: { width: 1280, height: 820 }, colorScheme: 'light' });
    // A microphone that is silent until the test has it say the phrase, so that a turn can start while an answer
    // plays (a barge-in): Chromium's fake device plays its file in a loop, on its own clock.
    await other.addInitScript(() => {
      const page = window as { say?: (samples: number[]) => Promise<void> };
      let audio: any;
      let mic: any;
      navigator.mediaDevices.getUserMedia = async () => {
        audio ??= new AudioContext({ sampleRate: 16_000 });
        mic = audio.createMediaStreamDestination();
        return mic.stream;
      };
      page.say = (samples) =>
        new Promise((resolve) => {
          const buffer = audio.createBuffer(1, samples.length, 16_000);
          buffer.copyToChannel(Float32Array.from(samples), 0);
          const source = audio.createBufferSource();
          source.buffer = buffer;
          source.connect(mic);
          source.onended = () => resolve();
          source.start();
        });
    });
    type Event = { type: string; item_id?: string; delta?: string; transcript?: string; audio_end_ms?: number; session?: { audio: { input: { format: unknown } } } };
    const received: Event[] = [];
    const sent: Event[] = [];
    try {
      const tab = await other.newPage();
      tab.on('pageerror', (error) => problems.push(`page error (voice): ${error.message}`));
      tab.on('console', (message) => {
        if (message.type() === 'error' && !/Failed to load resource/.test(message.text())) problems.push(`console (voice): ${message.text()}`);
      });
      tab.on('websocket', (socket) => {
        if (!socket.url().includes('/v1/realtime')) return;
        socket.on('framereceived', (frame) => received.push(JSON.parse(String(frame.payload)) as Event));
        socket.on('framesent', (frame) => sent.push(JSON.parse(String(frame.payload)) as Event));
      });
      const say = () => tab.evaluate((samples) => (window as { say(samples: number[]): Promise<void> }).say(samples), phrase);
      await tab.goto(`${voiced.url}/#voice`);
      await tab.waitForSelector('body[data-ready="true"]');
      await tab.selectOption('#voice-model', CHAT_MODEL_ID);
      await tab.selectOption('#voice-stt', 'whisper-test');
      // The voices are the speakers of the one speech model.
      await tab.waitForFunction(() => document.querySelector('#voice-voice-note')?.textContent === 'spoken by piper-test, the default speech model');
      const speakers = ((await (await fetch(`${voiced.url}/v1/audio/info?model=piper-test`)).json()) as { supported_speakers: string[] }).supported_speakers;
      await tab.waitForFunction((n) => document.querySelectorAll('#voice-voice option').length === n, speakers.length + 1);
      expect(await tab.locator('#voice-voice option').evaluateAll((options) => options.map((o) => (o as HTMLElement).getAttribute('value')))).toEqual(['', ...speakers]);
      await tab.fill('#voice-max-tokens', '24');
      // Every state the panel shows, in order.
      await tab.evaluate(() => {
        const panel = document.querySelector('#panel-voice') as HTMLElement;
        const states: string[] = [];
        new MutationObserver(() => panel.dataset.state !== states.at(-1) && states.push(panel.dataset.state)).observe(panel, { attributes: true });
        (window as { states?: string[] }).states = states;
      });
      await tab.click('#voice-start');
      await tab.locator('#voice-status', { hasText: 'listening' }).waitFor({ timeout: 30_000 });
      expect(await tab.textContent('#voice-start')).toBe('Stop');
      expect(await tab.isDisabled('#voice-max-tokens')).toBe(true);
      // The session takes 16 kHz PCM, the microphone's rate, with the panel's settings.
      expect(sent[0]).toMatchObject({ type: 'session.update', session: { max_output_tokens: 24, audio: { input: { format: { type: 'audio/pcm', rate: 16000 }, transcription: { model: 'whisper-test' } } } } });
      expect(received.find((e) => e.type === 'session.updated')?.session?.audio.input.format).toEqual({ type: 'audio/pcm', rate: 16000 });

      // A turn; its answer plays; the user speaks over it: the playback stops and the server hears how much was heard.
      await say();
      await tab.locator('#panel-voice[data-state="speaking"]').waitFor({ timeout: 90_000 });
      await say();
      await expect.poll(() => sent.some((e) => e.type === 'conversation.item.truncate'), { timeout: 30_000 }).toBe(true);
      // Both turns ended, and the second was answered: its answer plays.
      const count = (type: string) => received.filter((e) => e.type === type).length;
      await expect
        .poll(
          () => {
            const lastStop = received.map((e) => e.type).lastIndexOf('input_audio_buffer.speech_stopped');
            const answer = received.findIndex((e, i) => i > lastStop && e.type === 'response.created');
            return count('input_audio_buffer.speech_started') === 2 && count('input_audio_buffer.speech_stopped') === 2 && answer >= 0 && received.slice(answer).some((e) => e.type === 'response.done');
          },
          { timeout: 90_000, interval: 250 },
        )
        .toBe(true);
      await tab.waitForFunction(() => (window as { states: string[] }).states.filter((state) => state === 'speaking').length === 2, undefined, { timeout: 30_000 });
      expect(received.filter((e) => e.type === 'error')).toEqual([]);

      // The audio came back, and the panel counted every byte of it.
      const audioOf = (item?: string) => received.filter((e) => e.type === 'response.output_audio.delta' && (item === undefined || e.item_id === item)).reduce((n, e) => n + Buffer.from(e.delta!, 'base64').length, 0);
      expect(audioOf()).toBeGreaterThan(4800); // more than 100 ms of 24 kHz PCM16
      expect(Number(await tab.getAttribute('#panel-voice', 'data-audio-bytes'))).toBe(audioOf());
      // The states it went through: the user speaking (server VAD), waiting for the answer, the answer playing, cut by the user.
      const states = await tab.evaluate(() => (window as { states: string[] }).states);
      expect(states.join(' → ')).toMatch(/^connecting → listening → user → thinking → (.+ → )?speaking → user → thinking → (.+ → )?speaking$/);

      // The transcript: each user turn with what the server transcribed, each answer with its transcript's deltas.
      const turns = received.filter((e) => e.type === 'input_audio_buffer.speech_started').map((e) => e.item_id!);
      const userLines = await tab.locator('#voice-log .msg.user').evaluateAll((nodes) => nodes.map((n) => [(n as HTMLElement).dataset.item, (n as HTMLElement).querySelector('.content').textContent]));
      expect(userLines.map(([item]) => item)).toEqual(turns);
      for (const [item, text] of userLines) {
        const transcript = received.find((e) => e.type === 'conversation.item.input_audio_transcription.completed' && e.item_id === item)?.transcript;
        expect(text).toBe(transcript?.trim() || '(nothing heard)');
      }
      const answers = [...new Set(received.filter((e) => e.type === 'response.output_audio_transcript.delta').map((e) => e.item_id!))];
      expect(answers).toHaveLength(2);
      const answerLines = await tab.locator('#voice-log .msg.assistant').evaluateAll((nodes) => nodes.map((n) => [(n as HTMLElement).dataset.item, (n as HTMLElement).querySelector('.content').textContent]));
      expect(answerLines).toEqual(answers.map((item) => [item, received.filter((e) => e.type === 'response.output_audio_transcript.delta' && e.item_id === item).map((e) => e.delta).join('')]));
      expect(answerLines[1]![1]!.length).toBeGreaterThan(0);

      // The barge-in cut the first answer: one truncation, of audio that had played and no more than had arrived,
      // accepted by the server, and the line marked.
      const truncations = sent.filter((e) => e.type === 'conversation.item.truncate');
      expect(truncations).toHaveLength(1);
      expect(truncations[0]).toMatchObject({ item_id: answers[0], content_index: 0 });
      expect(truncations[0]!.audio_end_ms).toBeGreaterThan(0);
      expect(truncations[0]!.audio_end_ms).toBeLessThanOrEqual((audioOf(answers[0]) / 2 / 24_000) * 1000);
      expect(received.find((e) => e.type === 'conversation.item.truncated')).toMatchObject({ item_id: answers[0], audio_end_ms: truncations[0]!.audio_end_ms });
      expect(Number(await tab.getAttribute('#panel-voice', 'data-truncated'))).toBe(1);
      const cut = tab.locator(`#voice-log .msg.assistant[data-item="${answers[0]}"]`);
      expect(await cut.getAttribute('class')).toContain('cut');
      expect(await cut.locator('.meta').textContent()).toBe(`interrupted · heard ${(truncations[0]!.audio_end_ms! / 1000).toFixed(1)} s`);
      await tab.screenshot({ path: path.join(ARTIFACTS, 'playground-voice.png') });

      // Stop: the answer still playing stops with the session.
      await tab.click('#voice-start');
      await tab.locator('#voice-status', { hasText: /^stopped$/ }).waitFor({ timeout: 10_000 });
      expect(await tab.textContent('#voice-start')).toBe('Start');
      expect(await tab.getAttribute('#panel-voice', 'data-state')).toBeNull();
      expect(await tab.isDisabled('#voice-max-tokens')).toBe(false);
    } finally {
      await other.close();
      await voiced.stop();
    }
  }, 240_000);

  it('a speech file from /v1/audio/files plays in an <audio> element, fetched by byte range, and seeks', async () => {
    const fetched: Array<{ status: number; range: string | undefined }> = [];
    const onResponse = async (response: import('playwright-core').Response) => {
      if (!response.url().includes('/v1/audio/files/')) return;
      fetched.push({ status: response.status(), range: (await response.request().allHeaders()).range });
    };
    page.on('response', onResponse);
    try {
      const result = await page.evaluate(async () => {
        const res = await fetch('/v1/audio/speech', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'piper-test', input: 'The quick brown fox jumps over the lazy dog. Then it rests in the sun for a while.' }),
        });
        const { audio_url, duration: reported } = (await res.json()) as { audio_url: string; duration: number };
        const audio = document.createElement('audio') as HTMLAudioElement;
        document.body.append(audio);
        const once = (event: string) =>
          new Promise<void>((resolve, reject) => {
            audio.addEventListener(event, () => resolve(), { once: true });
            audio.addEventListener('error', () => reject(new Error(`media error ${audio.error?.code}: ${audio.error?.message}`)), { once: true });
          });
        const metadata = once('loadedmetadata');
        audio.src = audio_url;
        await metadata;
        const duration = audio.duration as number;
        await audio.play();
        // Playback advances (polled on its own events; the test's timeout bounds the wait).
        while ((audio.currentTime as number) < 0.2) await once('timeupdate');
        audio.pause();
        const seeked = once('seeked');
        audio.currentTime = duration - 0.5;
        await seeked;
        const position = audio.currentTime as number;
        audio.remove();
        return { reported, duration, position };
      });
      expect(result.reported).toBeGreaterThan(1);
      expect(result.duration).toBeCloseTo(result.reported, 2);
      expect(result.position).toBeCloseTo(result.duration - 0.5, 1);
      // The media element asked for byte ranges and got 206s.
      expect(fetched.length).toBeGreaterThan(0);
      expect(fetched.every((f) => f.status === 206 && /^bytes=\d*-\d*$/.test(f.range ?? '')), JSON.stringify(fetched)).toBe(true);
    } finally {
      page.off('response', onResponse);
    }
  }, 60_000);

  it('images: generates with progress, repaints a mask painted with the brush, and transforms a result', async () => {
    await open('images');
    await page.selectOption('#img-model', 'sd-test');
    await page.selectOption('#img-size', '64x64');
    await page.fill('#img-seed', '7');
    await page.fill('#img-steps', '2');
    await page.fill('#img-prompt', 'a lighthouse at dusk, oil painting');
    await watchText('#img-status');
    await page.click('#img-run');
    await page.locator('#img-results figure').first().waitFor({ timeout: 30_000 });
    await page.locator('#img-status[data-kind="ok"]').waitFor();
    const progress = await seenText('#img-status');
    expect(progress).toContain('image 1/1 · step 1/2');
    expect(progress.some((t) => /step 2\/2/.test(t))).toBe(true);
    expect(await page.textContent('#img-results figcaption')).toContain('64x64 · seed 7');

    // Edit: a source image, a mask painted across its middle with the mouse.
    const source = path.join(dir, 'source.png');
    await writeFile(source, await sharp({ create: { width: 64, height: 64, channels: 3, background: { r: 60, g: 140, b: 210 } } }).png().toBuffer());
    await page.click('#img-mode button[data-mode="edit"]');
    await page.setInputFiles('#img-file', source);
    await page.locator('#img-stage:not([hidden])').waitFor();
    await page.fill('#img-brush', '100');
    const box = (await page.locator('#img-mask').boundingBox())!;
    await page.mouse.move(box.x + box.width * 0.25, box.y + box.height * 0.5);
    await page.mouse.down();
    for (let i = 1; i <= 10; i++) await page.mouse.move(box.x + box.width * (0.25 + i * 0.05), box.y + box.height * 0.5);
    await page.mouse.up();
    const painted = await page.evaluate(() => {
      const canvas = document.querySelector('#img-mask') as HTMLCanvasElement;
      const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let n = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i]! > 0) n++;
      return n / (canvas.width * canvas.height);
    });
    expect(painted).toBeGreaterThan(0.1);
    expect(painted).toBeLessThan(0.9);
    await page.fill('#img-prompt', 'a round window');
    await page.click('#img-run');
    await page.locator('#img-results figure').nth(1).waitFor({ timeout: 30_000 });
    await page.locator('#img-status[data-kind="ok"]').waitFor();
    // The edit kept the unpainted corners exactly as sent.
    const corner = await page.evaluate(async () => {
      const img = document.querySelector('#img-results figure img') as HTMLImageElement;
      await img.decode();
      const canvas = document.createElement('canvas');
      canvas.width = img.naturalWidth;
      canvas.height = img.naturalHeight;
      const g = canvas.getContext('2d')!;
      g.drawImage(img, 0, 0);
      return [...g.getImageData(1, 1, 1, 1).data.slice(0, 3), canvas.width];
    });
    expect(corner).toEqual([60, 140, 210, 64]);
    await shot('images');

    // Image to image from a result.
    await page.click('#img-mode button[data-mode="img2img"]');
    await page.click('#img-results figure >> nth=0 >> button:has-text("Use as source")');
    await page.locator('#img-stage:not([hidden])').waitFor();
    await page.click('#img-run');
    await page.locator('#img-results figure').nth(2).waitFor({ timeout: 30_000 });
  }, 90_000);

  it('OCR: draws the boxes on the picture and lists each line with its confidence', async () => {
    await open('ocr');
    const rendered = await renderPage({ name: 'page', font: 'DejaVu Sans', size: 24, lines: 4, inverted: false, width: 960, offset: 0 });
    const file = path.join(dir, 'page.png');
    await writeFile(file, rendered.png);
    await page.setInputFiles('#ocr-file', file);
    await page.locator('#ocr-status[data-kind="ok"]').waitFor({ timeout: 40_000 });
    const rows = page.locator('#ocr-lines tbody tr');
    expect(await rows.count()).toBeGreaterThanOrEqual(3);
    expect((await rows.first().locator('td').nth(1).textContent())!.length).toBeGreaterThan(5);
    expect(await rows.first().locator('td').nth(2).textContent()).toMatch(/^0\.\d{3}$|^1\.000$/);
    // The boxes are drawn in colour over the grey page.
    const coloured = await page.evaluate(() => {
      const canvas = document.querySelector('#ocr-canvas') as HTMLCanvasElement;
      const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let n = 0;
      for (let i = 0; i < data.length; i += 4) if (Math.abs(data[i]! - data[i + 1]!) > 40 || Math.abs(data[i + 1]! - data[i + 2]!) > 40) n++;
      return n;
    });
    expect(coloured).toBeGreaterThan(500);
    expect(await page.textContent('#ocr-meta')).toMatch(/^\d+ lines · 960×\d+ · \d+ ms$/);
    await rows.nth(1).hover();
    await shot('ocr');
  }, 60_000);

  it('models: lists installed and catalog models; a pull shows its progress and the model appears; remove takes it away', async () => {
    await open('models');
    await page.locator('#models-table tbody tr').first().waitFor();
    expect(await page.textContent('#models-table tbody')).toContain('ppocr-v4-mobile');
    await page.fill('#models-filter', 'tiny-pull');
    const row = page.locator('#models-table tr[data-model="tiny-pull"]');
    expect(await row.locator('.badge').textContent()).toBe('not pulled');
    expect(await row.locator('td.num').textContent()).toBe('1.2 MB');
    await row.locator('button:has-text("Pull")').click();
    // The bar moves: caught part way.
    await page.waitForFunction(() => {
      const p = Number((document.querySelector('tr[data-model="tiny-pull"] .pull') as HTMLElement | null)?.dataset.progress);
      return p > 0.15 && p < 0.85;
    }, undefined, { timeout: 20_000 });
    expect(await row.locator('.badge').textContent()).toBe('pulling');
    expect(await row.locator('.pull span').textContent()).toMatch(/^[\d.]+ (kB|MB) \/ 1\.2 MB · [\d.]+ (B|kB|MB)\/s · model\.onnx$/);
    await page.fill('#models-filter', '');
    await page.fill('#models-filter', 'tiny');
    await shot('models');
    await row.locator('.badge:has-text("installed")').waitFor({ timeout: 20_000 });
    // It appears: in the server's list and in the speech-to-text picker.
    const listed = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(listed.data.map((m) => m.id)).toContain('tiny-pull');
    await page.waitForFunction(() => !!document.querySelector('#stt-model option[value="tiny-pull"]'));
    // Remove asks once more, then removes.
    await row.locator('button:has-text("Remove")').click();
    await row.locator('button:has-text("Confirm")').click();
    await row.locator('.badge:has-text("not pulled")').waitFor({ timeout: 10_000 });
    await page.waitForFunction(() => !document.querySelector('#stt-model option[value="tiny-pull"]'));
  }, 60_000);

  it('asks for the API key of a server that has one, and then works with it (HTTP and the WebSocket)', async () => {
    const keyed = await startTestServer({ server: { apiKey: 'correct horse/battery+staple' } });
    const other = await browser.newContext({ viewport: { width: 1280, height: 820 } });
    try {
      await keyed.engine.store.registerDirectory(await tinyZipformerModel(), { kind: 'asr-stream', id: 'zipformer-test' });
      await other.grantPermissions(['microphone'], { origin: keyed.url });
      const tab = await other.newPage();
      tab.on('pageerror', (error) => problems.push(`page error (keyed): ${error.message}`));
      await tab.goto(`${keyed.url}/`);
      await tab.locator('#key-dialog[open]').waitFor();
      expect(await tab.textContent('#server-status')).toMatch(/API key/i);
      await tab.fill('#key-input', 'correct horse/battery+staple');
      await tab.click('#key-save');
      await tab.waitForFunction(() => /^connected · 2 models$/.test(document.querySelector('#server-status')?.textContent ?? ''));
      // The live transcription socket carries the key as a subprotocol.
      await tab.click('#nav a[data-panel="transcribe"]');
      await tab.click('#stt-mic');
      await tab.waitForFunction(() => document.querySelector('#stt-live-status')?.textContent === 'listening…', undefined, { timeout: 20_000 });
      await tab.click('#stt-mic');
      await tab.locator('#stt-live-status[data-kind="ok"]').waitFor({ timeout: 20_000 });
    } finally {
      await other.close();
      await keyed.stop();
    }
  }, 60_000);

  it('on a server with no model of a page, says so there and points to Models; Send sends nothing and says why', async () => {
    const bare = await startTestServer({ engine: { threads: 1 } });
    const other = await browser.newContext({ viewport: { width: 1280, height: 820 } });
    try {
      const tab = await other.newPage();
      tab.on('pageerror', (error) => problems.push(`page error (bare): ${error.message}`));
      const requests: string[] = [];
      tab.on('request', (request) => requests.push(`${request.method()} ${new URL(request.url()).pathname}`));
      await tab.goto(`${bare.url}/`);
      await tab.waitForSelector('body[data-ready="true"]');
      const note = tab.locator('#panel-chat .no-model');
      expect(await note.textContent()).toMatch(/^No chat model is installed: download one on the Models page, or run `npx lserve pull <id>` where the server runs\. Open Models$/);
      await tab.fill('#chat-input', 'hello?');
      await tab.click('#chat-send');
      expect(await tab.textContent('#chat-status')).toMatch(/^No chat model is installed/);
      expect(requests.filter((r) => r.startsWith('POST'))).toEqual([]);
      expect(await tab.locator('#chat-log .msg').count()).toBe(0);
      // The pages of the other kinds say the same of theirs; the link opens Models.
      await tab.click('#nav a[data-panel="speech"]');
      expect(await tab.textContent('#panel-speech .no-model')).toMatch(/^No speech model is installed/);
      await tab.click('#panel-speech .no-model a');
      await tab.waitForSelector('#panel-models:not([hidden])');
    } finally {
      await other.close();
      await bare.stop();
    }
  }, 60_000);

  it('logged no page error and no Content-Security-Policy violation', async () => {
    expect(problems).toEqual([]);
    for (const panel of ['chat', 'transcribe', 'speech', 'voice', 'images', 'ocr', 'models']) {
      expect(existsSync(path.join(ARTIFACTS, `playground-${panel}.png`)), panel).toBe(true);
      const meta = await sharp(await readFile(path.join(ARTIFACTS, `playground-${panel}.png`))).metadata();
      expect([meta.width, meta.height]).toEqual([1280, 820]);
    }
  });
});
