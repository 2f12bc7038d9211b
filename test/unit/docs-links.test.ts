import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { anchors, documents, links, readDocument, REPO, slug } from '../helpers/markdown.js';

/**
 * Every relative link in README.md, docs/ and bench/ resolves: its file
 * exists in the repository, and its `#anchor` is a heading of that file as
 * GitHub names it. The documentation is split over many pages; a section
 * moved or renamed without its links fails here.
 */

const anchorCache = new Map<string, Set<string>>();
const anchorsOf = (rel: string) => {
  if (!anchorCache.has(rel)) anchorCache.set(rel, anchors(readDocument(rel)));
  return anchorCache.get(rel)!;
};

describe('GitHub heading anchors', () => {
  it('follow github-slugger', () => {
    expect(slug('Text (`bench/text.ts`)')).toBe('text-benchtextts');
    expect(slug("Runners, the pool's use after free, and spinning")).toBe('runners-the-pools-use-after-free-and-spinning');
    expect(slug('Models: pull, list, rm')).toBe('models-pull-list-rm');
    expect(slug('Synthetic Qwen3-0.6B Q8_0, 2 threads')).toBe('synthetic-qwen3-06b-q8_0-2-threads');
    expect(slug('Text to speech (Qwen3-TTS frame loop)')).toBe('text-to-speech-qwen3-tts-frame-loop');
    expect(slug('**Bold** and [a link](x.md)')).toBe('bold-and-a-link');
    expect([...anchors('# A\n\n## Findings\n\n## Findings\n\n```sh\n# not a heading\n```\n')]).toEqual(['a', 'findings', 'findings-1']);
  });
});

describe('relative links in the documentation', () => {
  const docs = documents();

  it('covers the README, docs/ and bench/', () => {
    expect(docs).toContain('README.md');
    expect(docs).toContain('docs/cli.md');
    expect(docs).toContain('bench/README.md');
  });

  it.each(docs)('%s: every relative link and anchor resolves', (doc) => {
    const broken: string[] = [];
    for (const { target, line } of links(readDocument(doc))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const [rawPath, anchor] = target.split('#', 2) as [string, string | undefined];
      const file = rawPath === '' ? doc : path.posix.normalize(path.posix.join(path.posix.dirname(doc), decodeURIComponent(rawPath)));
      const where = `${doc}:${line}: ${target}`;
      if (file.startsWith('..') || path.isAbsolute(file)) {
        broken.push(`${where} (outside the repository)`);
        continue;
      }
      const absolute = path.join(REPO, file);
      if (!existsSync(absolute)) {
        broken.push(`${where} (no such file)`);
        continue;
      }
      if (anchor === undefined) continue;
      if (!file.endsWith('.md') || statSync(absolute).isDirectory()) {
        broken.push(`${where} (an anchor into a file that is not Markdown)`);
        continue;
      }
      if (!anchorsOf(file).has(anchor)) broken.push(`${where} (no heading of ${file} has the anchor #${anchor})`);
    }
    expect(broken).toEqual([]);
  });
});
