import { readFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { CliError, EXIT_FAILURE } from './errors.js';

// The files a command reads (ocr, transcribe): paths, quoted globs, or - for stdin.

/** A file's bytes, or stdin's for '-'; errors say what is wrong in a few words. */
export async function readInput(input: string): Promise<Buffer> {
  if (input === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }
  try {
    return await readFile(input);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new Error(code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a directory' : code === 'EACCES' ? 'permission denied' : (error as Error).message);
  }
}

/**
 * Expands glob patterns (`*`, `?`, `[...]` within a path segment, `**` for
 * any depth) ourselves, so quoted globs work and Windows shells, which do not
 * expand them, behave the same. Plain names pass through untouched (a missing
 * file is reported when it is read, and the other files still run).
 */
export async function expandInputs(patterns: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const pattern of patterns) {
    if (pattern === '-' || !/[*?[]/.test(pattern)) {
      out.push(pattern);
      continue;
    }
    const matches = await glob(pattern);
    if (matches.length === 0) throw new CliError(`no files match '${pattern}'`, EXIT_FAILURE);
    out.push(...matches.sort());
  }
  return out;
}

async function glob(pattern: string): Promise<string[]> {
  const absolute = path.isAbsolute(pattern);
  const segments = pattern.split(/[\\/]+/).filter((s, i) => s !== '' || i === 0);
  let current = [absolute ? path.sep : '.'];
  const startIndex = absolute ? 1 : 0;
  for (let i = startIndex; i < segments.length; i++) {
    const segment = segments[i]!;
    const last = i === segments.length - 1;
    const next: string[] = [];
    for (const dir of current) {
      if (segment === '**') {
        next.push(...(await walkDirs(dir)));
      } else if (!/[*?[]/.test(segment)) {
        next.push(path.join(dir, segment));
      } else {
        const regex = segmentRegex(segment);
        const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
        for (const entry of entries) {
          if (regex.test(entry.name) && (last ? true : entry.isDirectory())) next.push(path.join(dir, entry.name));
        }
      }
    }
    current = next;
  }
  const files: string[] = [];
  for (const candidate of current) {
    const info = await stat(candidate).catch(() => undefined);
    if (info?.isFile()) files.push(absolute ? candidate : path.relative('.', candidate) || candidate);
  }
  return files;
}

async function walkDirs(dir: string): Promise<string[]> {
  const result = [dir];
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    if (entry.isDirectory() && !entry.name.startsWith('.')) result.push(...(await walkDirs(path.join(dir, entry.name))));
  }
  return result;
}

function segmentRegex(segment: string): RegExp {
  let source = '';
  for (let i = 0; i < segment.length; i++) {
    const c = segment[i]!;
    if (c === '*') source += '[^/]*';
    else if (c === '?') source += '[^/]';
    else if (c === '[') {
      const end = segment.indexOf(']', i + 1);
      if (end < 0) source += '\\[';
      else {
        source += `[${segment.slice(i + 1, end).replace(/^!/, '^').replace(/\\/g, '\\\\')}]`;
        i = end;
      }
    } else source += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  // Like shells, wildcards do not match hidden files.
  return new RegExp(`^${segment.startsWith('.') ? '' : '(?!\\.)'}${source}$`);
}
