/**
 * OCR benchmark: lserve's PP-OCR pipeline vs @gutenye/ocr-node (the reference
 * JS PP-OCR implementation, same PP-OCRv4 weights) vs tesseract.js (English
 * LSTM model from @tesseract.js-data/eng), side by side in one run, on the
 * same rendered pages (test/fixtures/ocr/corpus.ts: 3 fonts x 3 sizes x
 * dark-on-light / light-on-dark, 8 lines each).
 *
 *   npx tsx bench/ocr.ts [--pages N] [--threads N] [--runs N]
 *
 * Reports pages/s over the corpus, the median latency of a one-line image
 * and of a full page, and the character error rate (total edit distance /
 * total reference characters) of each engine. Absolute times on a shared
 * machine are noise; compare the ratios printed at the end.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/compose.js';
import { ocr } from '../src/core/tasks/ocr.js';
import { cer } from '../test/fixtures/ocr/cer.js';
import { pageSpecs, renderOneLine, renderPage } from '../test/fixtures/ocr/corpus.js';

interface Sample {
  png: Buffer;
  file: string;
  text: string;
}

interface EngineUnderTest {
  name: string;
  recognise(sample: Sample): Promise<string>;
  close(): Promise<void>;
}

const args = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const threads = flag('threads', 0);
const runs = flag('runs', 5);
const cacheDir = fileURLToPath(new URL('.cache/ocr/', import.meta.url));
const root = fileURLToPath(new URL('../', import.meta.url));

async function lserve(): Promise<EngineUnderTest> {
  const engine = new Engine({ home: path.join(cacheDir, 'home'), threads, keepAliveMs: -1 });
  return {
    name: 'lserve (PP-OCRv4)',
    recognise: async (s) => (await ocr(engine, { model: 'ppocr-v4-mobile', image: s.png })).text,
    close: () => engine.close(),
  };
}

async function gutenye(): Promise<EngineUnderTest> {
  const { default: Ocr } = await import('@gutenye/ocr-node');
  const instance = (await Ocr.create()) as { detect(file: string): Promise<Array<{ text: string }>> };
  return {
    name: '@gutenye/ocr-node (PP-OCRv4)',
    recognise: async (s) => (await instance.detect(s.file)).map((l) => l.text).join('\n'),
    close: async () => {},
  };
}

async function tesseract(): Promise<EngineUnderTest> {
  const { createWorker, OEM } = await import('tesseract.js');
  const worker = await createWorker('eng', OEM.LSTM_ONLY, {
    langPath: path.join(root, 'node_modules/@tesseract.js-data/eng/4.0.0_best_int'),
    gzip: true,
    cacheMethod: 'none',
  });
  return {
    name: 'tesseract.js (eng)',
    recognise: async (s) => (await worker.recognize(s.png)).data.text,
    close: async () => {
      await worker.terminate();
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const value = await fn();
  return [value, performance.now() - start];
}

async function main(): Promise<void> {
  await mkdir(cacheDir, { recursive: true });
  const specs = pageSpecs().slice(0, flag('pages', Infinity));
  const pages: Sample[] = [];
  for (const spec of specs) {
    const rendered = await renderPage(spec);
    const file = path.join(cacheDir, `${spec.name}.png`);
    await writeFile(file, rendered.png);
    pages.push({ png: rendered.png, file, text: rendered.text });
  }
  const one = await renderOneLine();
  const oneFile = path.join(cacheDir, 'one-line.png');
  await writeFile(oneFile, one.png);
  const line: Sample = { png: one.png, file: oneFile, text: one.text };
  console.log(`${pages.length} pages (${specs[0]?.name} … ${specs.at(-1)?.name}), ${pages.reduce((n, p) => n + p.text.length, 0)} characters; threads=${threads || 'default'}; ${process.arch}, node ${process.version}\n`);

  const rows: Array<{ name: string; pagesPerSec: number; lineMs: number; pageMs: number; cer: number }> = [];
  for (const make of [lserve, gutenye, tesseract]) {
    const subject = await make();
    await subject.recognise(pages[0]!); // warm-up: model load, first-run allocations
    let edits = 0;
    let chars = 0;
    const pageTimes: number[] = [];
    for (const page of pages) {
      const [text, ms] = await timed(() => subject.recognise(page));
      pageTimes.push(ms);
      edits += cer(page.text, text) * page.text.length;
      chars += page.text.length;
    }
    const lineTimes: number[] = [];
    for (let i = 0; i < runs; i++) lineTimes.push((await timed(() => subject.recognise(line)))[1]);
    const total = pageTimes.reduce((a, b) => a + b, 0);
    rows.push({ name: subject.name, pagesPerSec: pages.length / (total / 1000), lineMs: median(lineTimes), pageMs: median(pageTimes), cer: edits / chars });
    await subject.close();
    console.log(`done: ${subject.name}`);
  }

  console.log(`\n| engine | pages/s | 1-line median ms | page median ms | CER |\n|---|---:|---:|---:|---:|`);
  for (const r of rows) console.log(`| ${r.name} | ${r.pagesPerSec.toFixed(2)} | ${r.lineMs.toFixed(0)} | ${r.pageMs.toFixed(0)} | ${(r.cer * 100).toFixed(2)} % |`);
  const [ours, ...others] = rows;
  for (const other of others) {
    console.log(`lserve vs ${other.name}: ${(ours!.pagesPerSec / other.pagesPerSec).toFixed(2)}x pages/s, ${(other.lineMs / ours!.lineMs).toFixed(2)}x faster one-line latency`);
  }
}

await main();
