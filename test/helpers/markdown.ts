import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Just enough Markdown for the documentation's tests (test/unit/docs-links,
 * test/e2e/docs-blocks): the documents, their fenced blocks, their headings
 * with the anchors GitHub gives them, and their links. Not a Markdown parser:
 * the rules below are the ones the repository's documents use.
 */

export const REPO = fileURLToPath(new URL('../../', import.meta.url));

/** Every Markdown file of a folder of the repository, recursively, as paths relative to the repository (caches and dependencies left out). */
export function markdownFiles(folder: string): string[] {
  const out: string[] = [];
  const walk = (rel: string) => {
    for (const entry of readdirSync(path.join(REPO, rel), { withFileTypes: true })) {
      if (entry.name.startsWith('.') || entry.name === 'node_modules') continue;
      const child = path.posix.join(rel, entry.name);
      if (entry.isDirectory()) walk(child);
      else if (entry.name.endsWith('.md')) out.push(child);
    }
  };
  walk(folder);
  return out.sort();
}

/** The documents the documentation tests read: the README, docs/ and bench/. */
export function documents(): string[] {
  return ['README.md', ...markdownFiles('docs'), ...markdownFiles('bench')];
}

export function readDocument(rel: string): string {
  return readFileSync(path.join(REPO, rel), 'utf8');
}

export interface FencedBlock {
  /** The whole info string (`sh runnable`), and its first word (`sh`). */
  info: string;
  lang: string;
  body: string;
  /** 1-based line of the opening fence. */
  line: number;
}

interface Line {
  text: string;
  /** Inside a fenced block, its fences included. */
  fenced: boolean;
}

function scan(text: string): { lines: Line[]; blocks: FencedBlock[] } {
  const lines: Line[] = [];
  const blocks: FencedBlock[] = [];
  let open: { fence: string; block: FencedBlock; body: string[] } | undefined;
  text.split('\n').forEach((raw, i) => {
    if (open) {
      lines.push({ text: raw, fenced: true });
      if (raw.trim().startsWith(open.fence) && raw.trim().replace(/[`~]/g, '') === '' && raw.trim().length >= open.fence.length) {
        open.block.body = open.body.join('\n');
        blocks.push(open.block);
        open = undefined;
      } else {
        open.body.push(raw);
      }
      return;
    }
    const fence = /^ {0,3}(`{3,}|~{3,})(.*)$/.exec(raw);
    if (fence) {
      const info = fence[2]!.trim();
      open = { fence: fence[1]!, block: { info, lang: info.split(/\s+/)[0] ?? '', body: '', line: i + 1 }, body: [] };
      lines.push({ text: raw, fenced: true });
      return;
    }
    lines.push({ text: raw, fenced: false });
  });
  if (open) throw new Error(`a fenced block opened at line ${open.block.line} is never closed`);
  return { lines, blocks };
}

export function fencedBlocks(text: string): FencedBlock[] {
  return scan(text).blocks;
}

/** The text of the lines outside fenced blocks, with line numbers (1-based). */
export function proseLines(text: string): Array<{ text: string; line: number }> {
  return scan(text)
    .lines.map((l, i) => ({ ...l, line: i + 1 }))
    .filter((l) => !l.fenced)
    .map(({ text: t, line }) => ({ text: t, line }));
}

/**
 * GitHub's anchor for a heading (github-slugger, as github.com renders
 * Markdown): the rendered text in lower case, every character that is not a
 * letter, mark, number, connector (`_`), hyphen or space removed, spaces
 * turned into hyphens; a repeated anchor gets `-1`, `-2`, ….
 */
export function slug(heading: string): string {
  const rendered = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/`([^`]*)`/g, '$1') // code spans: their content
    .replace(/<[^>]+>/g, '') // inline HTML tags
    .replace(/(\*\*|__|\*)(?=\S)([\s\S]*?\S)\1/g, '$2'); // emphasis
  return rendered
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a document's headings give it, in order. */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { text: line } of proseLines(text)) {
    const heading = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = slug(heading[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

export interface Link {
  target: string;
  line: number;
}

/** Inline links and images (`[text](target)`, `![alt](target)`) and reference definitions (`[name]: target`) outside code. */
export function links(text: string): Link[] {
  const out: Link[] = [];
  for (const { text: raw, line } of proseLines(text)) {
    // Code spans hold examples, not links.
    const prose = raw.replace(/(`+)[\s\S]*?\1/g, (m) => ' '.repeat(m.length));
    for (const m of prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ target: m[1]!, line });
    const definition = /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/.exec(prose);
    if (definition) out.push({ target: definition[1]!, line });
  }
  return out;
}
