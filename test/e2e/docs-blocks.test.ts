import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { documents, fencedBlocks, markdownFiles, readDocument, REPO, type FencedBlock } from '../helpers/markdown.js';

/**
 * The README's and docs' shell blocks work as written in a clone:
 *
 * - every shell block spells the CLI `npx lserve` (the clone's own command,
 *   found by npm without installing anything): a bare `lserve` is not on
 *   PATH after `npm ci`;
 * - every block marked runnable (info string `sh runnable`) runs: with
 *   `bash -e` from a scratch folder inside the clone, the model store in a
 *   temporary LSERVE_HOME, no network and no model but the bundled OCR one.
 *   A `text output` block right after it lists lines its stdout must hold;
 * - the README stays short, and its test command is the one CI runs.
 *
 * How to mark a block, for writers: docs/development.md, "Documentation".
 */

const SHELL = new Set(['sh', 'bash', 'shell', 'console', 'zsh']);

/** Shell commands a block shows: the lines of a shell block; the `$ …` lines of a text block (a transcript). Comments and heredoc bodies left out. */
function commandLines(block: FencedBlock): Array<{ text: string; offset: number }> {
  const out: Array<{ text: string; offset: number }> = [];
  let heredoc: string | undefined;
  block.body.split('\n').forEach((raw, i) => {
    if (heredoc !== undefined) {
      if (raw.trim() === heredoc) heredoc = undefined;
      return;
    }
    let text: string;
    if (SHELL.has(block.lang)) text = raw.replace(/^\$\s+/, '');
    else if (/^\$\s/.test(raw)) text = raw.replace(/^\$\s+/, '');
    else return;
    const marker = /<<-?\s*'?"?(\w+)'?"?/.exec(text);
    if (marker) heredoc = marker[1];
    // A comment: '#' at the start or after a blank, outside quotes (near enough for these blocks).
    let quote: string | undefined;
    for (let c = 0; c < text.length; c++) {
      const ch = text[c]!;
      if (quote) {
        if (ch === quote) quote = undefined;
      } else if (ch === "'" || ch === '"') quote = ch;
      else if (ch === '#' && (c === 0 || /\s/.test(text[c - 1]!))) {
        text = text.slice(0, c);
        break;
      }
    }
    if (text.trim()) out.push({ text, offset: i + 1 });
  });
  return out;
}

/** The commands of a line that call the CLI bare (`lserve …` rather than `npx lserve …`). */
function bareCalls(line: string): string[] {
  const calls: string[] = [];
  // Command positions: the line's start, and after a pipe, a list operator, a subshell or a command substitution.
  for (const segment of line.split(/\|\|?|&&|;|\$\(|`|\(/)) {
    const words = segment.trim().split(/\s+/);
    // Words that start a command without being it: variable assignments, keywords, wrappers.
    while (words.length && (/^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!) || ['do', 'then', 'else', 'time', 'exec', 'env', 'sudo', '!', 'xargs'].includes(words[0]!))) words.shift();
    if (words[0] === 'lserve') calls.push(segment.trim());
  }
  return calls;
}

describe('the CLI is spelled `npx lserve` in every shell block', () => {
  it('recognises a bare call', () => {
    expect(bareCalls('lserve pull qwen3-0.6b')).toHaveLength(1);
    expect(bareCalls('npx lserve pull qwen3-0.6b')).toEqual([]);
    expect(bareCalls('HF_ENDPOINT=https://m.example lserve pull whisper-base')).toHaveLength(1);
    expect(bareCalls('arecord -f S16_LE | lserve transcribe --stream')).toHaveLength(1);
    expect(bareCalls('npx lserve pull a && lserve serve')).toHaveLength(1);
    expect(bareCalls('npm run fixtures -- DIR | while read -r p k; do lserve pull "$p"; done')).toHaveLength(1);
    expect(bareCalls('npx --yes --package ./lserve-0.1.0.tgz lserve serve')).toEqual([]);
    expect(bareCalls('ls ~/.lserve/models')).toEqual([]);
  });

  it.each(documents())('%s', (doc) => {
    const bare: string[] = [];
    for (const block of fencedBlocks(readDocument(doc))) {
      if (!SHELL.has(block.lang) && block.lang !== 'text') continue;
      for (const { text, offset } of commandLines(block)) for (const call of bareCalls(text)) bare.push(`${doc}:${block.line + offset}: ${call}`);
    }
    expect(bare, 'write `npx lserve …`: a bare `lserve` is not on PATH in a clone (README, Quick start)').toEqual([]);
  });
});

describe('the README', () => {
  const readme = readDocument('README.md');

  it('is at most 300 lines', () => {
    expect(readme.split('\n').length - (readme.endsWith('\n') ? 1 : 0)).toBeLessThanOrEqual(300);
  });

  it("gives CI's test command in its quick start, and starts the server with `npx lserve serve`", () => {
    const quickStart = readme.slice(readme.indexOf('## Quick start'));
    const first = fencedBlocks(quickStart)[0]!;
    const commands = first.body.split('\n').map((l) => l.replace(/\s+#.*$/, '').trim()).filter(Boolean);
    expect(commands).toHaveLength(2);
    expect(commands[0]).toMatch(/^npm ci && npx lserve serve\b/);
    // .ci/run runs "exactly the README's test command": its last command.
    const ci = readFileSync(path.join(REPO, '.ci/run'), 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
    expect(ci.at(-1)).toBe(commands[1]);
  });
});

interface Runnable {
  doc: string;
  block: FencedBlock;
  /** Lines stdout must contain in order, from a `text output` block right after. */
  expected?: string[];
}

function runnableBlocks(): Runnable[] {
  const out: Runnable[] = [];
  for (const doc of ['README.md', ...markdownFiles('docs')]) {
    const blocks = fencedBlocks(readDocument(doc));
    blocks.forEach((block, i) => {
      const words = block.info.split(/\s+/);
      if (!words.includes('runnable')) return;
      const next = blocks[i + 1];
      const text = readDocument(doc).split('\n');
      // "Right after": only blank lines between this block's closing fence and the next block.
      const closing = block.line + block.body.split('\n').length + 1;
      const adjacent = next && text.slice(closing, next.line - 1).every((l) => l.trim() === '');
      const expected = adjacent && next.info === 'text output' ? next.body.split('\n').filter((l) => l.trim()) : undefined;
      out.push({ doc, block, expected });
    });
  }
  return out;
}

const collapse = (s: string) => s.trim().replace(/\s+/g, ' ');
const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Whether `lines` appear in `stdout` in order, one per line of output, whitespace runs alike, `…` matching any text. */
function containsInOrder(stdout: string, lines: string[]): boolean {
  const out = stdout.split('\n').map(collapse);
  let at = 0;
  for (const line of lines) {
    const pattern = new RegExp(`^${collapse(line).split('…').map(escapeRegExp).join('.*')}$`);
    while (at < out.length && !pattern.test(out[at]!)) at++;
    if (at === out.length) return false;
    at++;
  }
  return true;
}

function runBlock(script: string, cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', script], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('runnable blocks', () => {
  const blocks = runnableBlocks();
  // Inside the clone, where `npx lserve` finds the clone's CLI; ignored by git.
  const scratchRoot = path.join(REPO, 'test', '.docs-blocks');
  mkdirSync(scratchRoot, { recursive: true });
  const home = mkdtempSync(path.join(os.tmpdir(), 'lserve-docs-home-'));
  afterAll(() => {
    rmSync(home, { recursive: true, force: true });
    rmSync(scratchRoot, { recursive: true, force: true });
  });

  // As a newcomer's shell: none of lserve's settings but the model store; the suite's LSERVE_LLAMA_BUILD stays.
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LSERVE_') || k === 'LSERVE_LLAMA_BUILD'));
  Object.assign(env, {
    LSERVE_HOME: home,
    NO_COLOR: '1',
    npm_config_update_notifier: 'false',
    // The first `npx lserve` of a clone links the clone into npm's cache and runs its `prepare`
    // script, the build, again. The suite has built already; a second build would rewrite dist/
    // under the other test files while they run the CLI.
    npm_config_ignore_scripts: 'true',
  });

  it('exist in the README and in docs/', () => {
    expect(blocks.some((b) => b.doc === 'README.md')).toBe(true);
    expect(blocks.some((b) => b.doc.startsWith('docs/'))).toBe(true);
  });

  const check = async ({ block, expected }: Runnable) => {
    expect(block.lang, 'a runnable block is a shell block').toBe('sh');
    const cwd = mkdtempSync(path.join(scratchRoot, 'block-'));
    const result = await runBlock(block.body, cwd, env, 60_000);
    const report = `exit ${result.code}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;
    expect(result.code, report).toBe(0);
    if (expected) expect(containsInOrder(result.stdout, expected), `stdout lacks, in order:\n${expected.join('\n')}\n${report}`).toBe(true);
  };
  const named = blocks.map((b) => [`${b.doc}:${b.block.line}`, b] as const);

  // The first alone: the first `npx lserve` of a clone links it into npm's cache, which two at once could race on.
  it.each(named.slice(0, 1))('%s', (_name, block) => check(block));
  describe.concurrent('the others, side by side', () => {
    it.each(named.slice(1))('%s', (_name, block) => check(block));
  });
});
