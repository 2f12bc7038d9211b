import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { beforeAll, describe, expect, it } from 'vitest';

/**
 * The import rules of docs/architecture.md, checked over every module under
 * src/. Arrows point from importer to imported:
 *
 *   cli, http → realtime → api, core/tasks → core   (adapters call tasks; a realtime session orchestrates them)
 *   compose   → families → core/tasks' interfaces, runtimes, audio, image, core
 *   runtimes  → core                             (nothing points back up)
 *
 * Every kind of import counts, because each one ties two modules together:
 * static `import`, `import type`, `export … from`, dynamic `import()` and
 * `typeof import()`. Package imports are ignored; relative specifiers written
 * with `.js` are resolved to the `.ts`/`.tsx` source.
 *
 * The checkers (`findCycles`, `layerViolations`, `misplacedRealtime`) are
 * pure functions over an edge list (or the file list), so the second
 * `describe` feeds them a hand-made broken graph to show that they really
 * report what they are meant to.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** One import: `from` imports `to` (both repo-relative, `src/...`) at `line` of `from`. */
interface Edge {
  from: string;
  to: string;
  line: number;
  /** `import type`, `export type … from` or `typeof import()`: it ties types only (gone from the emitted JavaScript). */
  typeOnly?: boolean;
}

// ─── Reading the imports ────────────────────────────────────────────────────

/**
 * Every relative module specifier in a source text, with its line. TypeScript's
 * own import scanner (`preProcessFile`, what its language service uses to find
 * a file's dependencies) sees every syntax — `import`, `import type`,
 * `export … from`, `import()`, `typeof import()` — and skips comments and
 * strings; it is several times faster than building a full syntax tree.
 */
function importsOf(text: string): { spec: string; line: number; typeOnly: boolean }[] {
  return ts
    .preProcessFile(text, true, false)
    .importedFiles.filter((f) => f.fileName.startsWith('.'))
    .map((f) => ({ spec: f.fileName, line: text.slice(0, f.pos).split('\n').length, typeOnly: typeOnlyAt(text, f.pos) }));
}

/**
 * Whether the import whose specifier starts at `pos` is type-only, read from
 * the keyword before it: `import type …`, `export type … from`, or `typeof
 * import(…)`. Anything else counts as a value import (`import { type A }`
 * too: under NodeNext it still loads the module), which can only make a rule
 * about type-only imports stricter, never let a value import through.
 */
function typeOnlyAt(text: string, pos: number): boolean {
  const before = text.slice(0, pos);
  const keyword = Math.max(lastWord(before, 'import'), lastWord(before, 'export'));
  if (keyword < 0) return false;
  if (/\btypeof\s*$/.test(before.slice(0, keyword))) return true;
  // `import type from './x.js'` imports a default export named `type`.
  return /^(import|export)\s+type\s+(?!from\b)/.test(before.slice(keyword));
}

/** Where `word` last occurs in `text` as a whole word, or -1. */
function lastWord(text: string, word: string): number {
  for (let at = text.lastIndexOf(word); at >= 0; at = text.lastIndexOf(word, at - 1)) {
    if (!/[\w$]/.test(text[at - 1] ?? '') && !/[\w$]/.test(text[at + word.length] ?? '')) return at;
  }
  return -1;
}

/** The .ts/.tsx/.mts files under `dir`, repo-relative with `/` separators, sorted. */
function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) files.push(...sourceFiles(full));
    else if (/\.(ts|tsx|mts)$/.test(e.name) && !e.name.endsWith('.d.ts')) files.push(path.relative(ROOT, full).split(path.sep).join('/'));
  }
  return files.sort();
}

/** The import graph of src/: its files, its edges, and relative specifiers that resolve to nothing. */
function srcGraph(): { files: string[]; edges: Edge[]; unresolved: string[] } {
  const files = sourceFiles(path.join(ROOT, 'src'));
  const known = new Set(files);
  const edges: Edge[] = [];
  const unresolved: string[] = [];
  for (const from of files) {
    for (const { spec, line, typeOnly } of importsOf(readFileSync(path.join(ROOT, from), 'utf8'))) {
      const base = path.posix.join(path.posix.dirname(from), spec);
      // NodeNext: `./x.js` is written for the source `./x.ts` (or `.tsx`).
      const candidates = [base.replace(/\.js$/, '.ts'), base.replace(/\.js$/, '.tsx'), base.replace(/\.mjs$/, '.mts'), base.replace(/\.jsx$/, '.tsx'), base];
      const to = candidates.find((c) => known.has(c));
      if (to) edges.push({ from, to, line, typeOnly });
      // A file outside src/ (none today) is no layer's concern; a missing one means a misread import.
      else if (!candidates.some((c) => existsSync(path.join(ROOT, c)))) unresolved.push(`${from}:${line} → ${spec}`);
    }
  }
  return { files, edges, unresolved };
}

// ─── Cycles ─────────────────────────────────────────────────────────────────

/**
 * Import cycles, one per strongly connected component (Tarjan), each given as
 * a shortest closed path through the component's first file, followed by the
 * other files of the component when the path does not visit them all.
 */
function findCycles(edges: readonly Edge[]): string[] {
  const adj = new Map<string, string[]>();
  for (const { from, to } of edges) {
    if (!adj.has(from)) adj.set(from, []);
    if (!adj.has(to)) adj.set(to, []);
    adj.get(from)!.push(to);
  }
  const nodes = [...adj.keys()].sort();
  for (const n of nodes) adj.get(n)!.sort();

  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const strongConnect = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of adj.get(v)!) {
      if (!index.has(w)) {
        strongConnect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || adj.get(v)!.includes(v)) components.push(component.sort());
    }
  };
  for (const v of nodes) if (!index.has(v)) strongConnect(v);

  return components.map((component) => {
    const inside = new Set(component);
    const start = component[0];
    // Breadth-first from `start` back to itself, staying inside the component.
    const previous = new Map<string, string>();
    const queue = [start];
    while (queue.length > 0 && !previous.has(start)) {
      const v = queue.shift()!;
      for (const w of adj.get(v)!) {
        if (inside.has(w) && !previous.has(w)) {
          previous.set(w, v);
          queue.push(w);
        }
      }
    }
    const loop = [start];
    for (let v = previous.get(start)!; v !== start; v = previous.get(v)!) loop.unshift(v);
    loop.unshift(start);
    const rest = component.filter((f) => !loop.includes(f));
    return loop.join(' → ') + (rest.length ? `  (same cycle group: ${rest.join(', ')})` : '');
  });
}

// ─── Layers ─────────────────────────────────────────────────────────────────

/** The layer a file of src/ belongs to: `core`, `core/tasks`, `families/<name>`, `runtimes/<name>`, … */
function layerOf(file: string): string {
  // The runner's entry is the composition root of a runner process.
  if (file === 'src/compose.ts' || file === 'src/runner.ts') return 'compose';
  const m = /^src\/(core\/tasks|core|families\/[^/]+|runtimes\/[^/]+|cli|http|mcp|api|realtime|audio|image|ui)\//.exec(file);
  return m ? m[1] : 'unknown';
}

const isFamily = (layer: string) => layer.startsWith('families/');
/** A family's one entry: its loaders and preparers (core/loader.ts Family). */
const FAMILY_ENTRY = /^src\/families\/[^/]+\/index\.ts$/;
const isRuntime = (layer: string) => layer.startsWith('runtimes/');
const isRoute = (file: string) => file.startsWith('src/http/routes/');
/** The Realtime API's protocol: its events, wire shapes, ids, errors' wire form, session objects. */
const isRealtimeProtocol = (file: string) => file.startsWith('src/api/realtime/');

/**
 * The core modules shared processing may use. docs/architecture.md allows
 * core's errors and units (today audio/ and image/ only use errors). Both are
 * leaves (see the rule below), so this cannot pull the rest of core — the
 * catalog, store, engine — into audio/ or image/.
 */
const SHARED_CORE = new Set(['src/core/errors.ts', 'src/core/units.ts']);

interface Rule {
  /** Which importers the rule is about. */
  applies: (fromLayer: string, fromFile: string) => boolean;
  /** Whether importing `toFile` (in `toLayer`) breaks it; `typeOnly`: the import ties types only. */
  forbids: (toLayer: string, toFile: string, fromLayer: string, typeOnly: boolean) => boolean;
  why: string;
}

const RULES: Rule[] = [
  {
    // The engine is handed its loaders by compose.ts; it never reaches for them.
    applies: (from) => from === 'core' || from === 'core/tasks',
    forbids: (to) => isFamily(to) || isRuntime(to) || to === 'compose',
    why: 'core and its tasks import no family, runtime or composition root',
  },
  {
    // A runtime is a thin layer over a backend and knows no model family.
    applies: (from) => isRuntime(from),
    forbids: (to) => isFamily(to) || to === 'compose',
    why: 'a runtime imports no family and not the composition root',
  },
  {
    // Families are independent plug-ins; what two of them share lives in a task, runtime, audio/ or image/.
    applies: (from) => isFamily(from),
    forbids: (to, _file, from) => (isFamily(to) && to !== from) || to === 'compose',
    why: 'a family imports no other family and not the composition root',
  },
  {
    // A family's index.ts is all the composition root knows of it: what the family loads is its own business.
    applies: (from) => from === 'compose',
    forbids: (to, file) => isFamily(to) && !FAMILY_ENTRY.test(file),
    why: 'the composition root imports a family only through its index.ts',
  },
  {
    // The CLI entry calls compose.ts to build the engine; commands reach models only through tasks.
    applies: (from) => from === 'cli',
    forbids: (to) => isFamily(to) || isRuntime(to),
    why: 'cli/ imports no family or runtime (only through compose.ts)',
  },
  {
    // The server is handed a ready engine by the CLI.
    applies: (from) => from === 'http',
    forbids: (to) => isFamily(to) || isRuntime(to) || to === 'compose',
    why: 'http/ imports no family, runtime or composition root',
  },
  {
    // The MCP server is an adapter beside cli/ and http/: tasks as tools. It reads inputs with the server's URL rules (http/net, http/remote-input).
    applies: (from) => from === 'mcp',
    forbids: (to) => isFamily(to) || isRuntime(to) || ['compose', 'cli', 'realtime'].includes(to),
    why: 'mcp/ imports no family, runtime, composition root, cli/ or realtime/',
  },
  {
    // Tasks are built on core; core never reaches up into them (a module of core that runs tasks is a task, or realtime/).
    applies: (from) => from === 'core',
    forbids: (to) => to === 'core/tasks',
    why: 'core imports nothing from core/tasks',
  },
  {
    // A realtime session orchestrates tasks (chat, transcribe, speak, VAD) over the protocol of api/realtime: above both, below the adapters.
    applies: (from) => from === 'realtime',
    forbids: (to) => isFamily(to) || isRuntime(to) || ['compose', 'cli', 'http'].includes(to),
    why: 'realtime/ imports no family, runtime, composition root, cli/ or http/',
  },
  {
    applies: (from) => !['realtime', 'cli', 'http'].includes(from),
    forbids: (to) => to === 'realtime',
    why: 'only the adapters (cli/, http/) import realtime/',
  },
  {
    // The protocol is wire shapes: what runs a session (the engine, tasks at work) is realtime/'s. Tools and usage are the chat task's types.
    applies: (_from, file) => isRealtimeProtocol(file),
    forbids: (to, file, _from, typeOnly) => (to === 'core' && file !== 'src/core/errors.ts') || (to === 'core/tasks' && !typeOnly),
    why: 'api/realtime/ imports from core only errors.ts, and from core/tasks only types',
  },
  {
    // Whoever speaks the protocol runs a session: that is realtime/, and the route that carries its events.
    applies: (from, file) => from !== 'realtime' && !isRealtimeProtocol(file) && file !== 'src/http/routes/realtime.ts',
    forbids: (_to, file) => isRealtimeProtocol(file),
    why: 'api/realtime/ is imported only by realtime/ and http/routes/realtime.ts',
  },
  {
    // Wire types and request schemas: below the adapters, beside the tasks.
    applies: (from) => from === 'api',
    forbids: (to) => isFamily(to) || isRuntime(to) || ['compose', 'cli', 'http'].includes(to),
    why: 'api/ imports no family, runtime, composition root, cli/ or http/',
  },
  {
    // One route group is one adapter: what two of them share sits beside them in http/ (or in api/, or a task).
    applies: (_from, file) => isRoute(file) && file !== 'src/http/routes/index.ts',
    forbids: (_to, file) => isRoute(file),
    why: 'a route imports no other route (routes/index.ts, their table, imports them all)',
  },
  {
    // Shared codecs and signal / image processing: usable by every family and adapter.
    applies: (from) => from === 'audio' || from === 'image',
    forbids: (to, file, from) => to !== from && !SHARED_CORE.has(file),
    why: 'audio/ and image/ import only themselves and core/errors.ts, core/units.ts',
  },
  {
    // Reading audio never needs the writing side: what both use (the checksums, audio/crc.ts) sits beside them.
    applies: (_from, file) => file.startsWith('src/audio/containers/') || file.startsWith('src/audio/decoders/'),
    forbids: (_to, file) => file.startsWith('src/audio/encode/'),
    why: 'audio/containers/ and audio/decoders/ import nothing from audio/encode/',
  },
  {
    // The playground runs in the browser: it reaches the server only through the public API, never its modules.
    applies: (from) => from === 'ui',
    forbids: (to) => to !== 'ui',
    why: 'ui/ (browser code) imports only ui/',
  },
  {
    applies: (from) => from !== 'ui',
    forbids: (to) => to === 'ui',
    why: 'nothing on the server imports ui/ (it is served as files)',
  },
  {
    // Keeps the previous rule honest: what audio/ and image/ may import depends on nothing.
    applies: (_from, file) => SHARED_CORE.has(file),
    forbids: () => true,
    why: 'core/errors.ts and core/units.ts import nothing from src/',
  },
];

/** Every edge that breaks a layer rule, as `file:line → target  (rule)`. */
function layerViolations(edges: readonly Edge[]): string[] {
  const broken: string[] = [];
  for (const e of edges) {
    const from = layerOf(e.from);
    const to = layerOf(e.to);
    for (const rule of RULES) {
      if (rule.applies(from, e.from) && rule.forbids(to, e.to, from, e.typeOnly ?? false)) {
        broken.push(`${e.from}:${e.line} → ${e.to}  (${rule.why})`);
      }
    }
  }
  return broken;
}

/** Where realtime lives: its home, its protocol, the route that carries it. */
const REALTIME_PLACES = ['src/realtime/', 'src/api/realtime/', 'src/http/routes/realtime.ts'];

/** Files named for realtime (a `realtime` folder or file name) outside its places: realtime has one home. */
function misplacedRealtime(files: readonly string[]): string[] {
  return files.filter((f) => /(^|\/)realtime([/.-]|$)/.test(f.replace(/^src\//, '')) && !REALTIME_PLACES.some((place) => f.startsWith(place)));
}

// ─── Tests ──────────────────────────────────────────────────────────────────

describe('src/ import graph', () => {
  let graph: ReturnType<typeof srcGraph>;
  beforeAll(() => {
    graph = srcGraph();
  });

  it('reads every import (else a rule could pass by not seeing an edge)', () => {
    expect(graph.unresolved).toEqual([]);
    expect(graph.edges.length).toBeGreaterThan(100);
    // compose.ts loads the families with import(): those edges are seen too.
    expect(graph.edges.some((e) => e.from === 'src/compose.ts' && isFamily(layerOf(e.to)))).toBe(true);
  });

  it('puts every file in a known layer (a new folder needs a rule here and in docs/architecture.md)', () => {
    expect(graph.files.filter((f) => layerOf(f) === 'unknown')).toEqual([]);
  });

  it('has no import cycle (type-only imports count)', () => {
    expect(findCycles(graph.edges)).toEqual([]);
  });

  it('keeps the layer rules of docs/architecture.md', () => {
    expect(layerViolations(graph.edges)).toEqual([]);
  });

  it('gives every family one entry, index.ts, which the composition root imports', () => {
    const families = [...new Set(graph.files.map(layerOf).filter(isFamily))].sort();
    expect(families.filter((family) => !graph.files.includes(`src/${family}/index.ts`))).toEqual([]);
    const entered = new Set(graph.edges.filter((e) => e.from === 'src/compose.ts' && FAMILY_ENTRY.test(e.to)).map((e) => layerOf(e.to)));
    expect(families.filter((family) => !entered.has(family))).toEqual([]);
  });

  it('keeps realtime in its one home (src/realtime/, its protocol in src/api/realtime/, its route)', () => {
    expect(misplacedRealtime(graph.files)).toEqual([]);
  });
});

describe('the checkers themselves', () => {
  it('find relative imports of every syntax, with their lines, and which tie types only', () => {
    const text = [
      "import { a } from './a.js';",
      "import type { B } from './b.js';",
      "export { c } from './c.js';",
      "import fs from 'node:fs';",
      "// import { no } from './comment.js';",
      "const d = () => import('./d.js');",
      "let e: Promise<typeof import('./e.js').E>;",
      "const s = \"import('./string.js')\";",
      "export * from '../f.js';",
      'function g() {',
      "  return import(",
      "    './g.js');",
      '}',
      'import type {',
      '  H,',
      '  Important,',
      "} from './h.js';",
      "export type { I } from './i.js';",
      "import { type J } from './j.js';",
      "import type from './k.js';",
    ].join('\n');
    expect(importsOf(text)).toEqual([
      { spec: './a.js', line: 1, typeOnly: false },
      { spec: './b.js', line: 2, typeOnly: true },
      { spec: './c.js', line: 3, typeOnly: false },
      { spec: './d.js', line: 6, typeOnly: false },
      { spec: './e.js', line: 7, typeOnly: true },
      { spec: '../f.js', line: 9, typeOnly: false },
      { spec: './g.js', line: 12, typeOnly: false },
      { spec: './h.js', line: 17, typeOnly: true },
      { spec: './i.js', line: 18, typeOnly: true },
      // Still loads the module under NodeNext; and a default export named `type`.
      { spec: './j.js', line: 19, typeOnly: false },
      { spec: './k.js', line: 20, typeOnly: false },
    ]);
  });

  it('report a cycle and a forbidden import in a hand-made graph', () => {
    const edges: Edge[] = [
      // A cycle inside core …
      { from: 'src/core/engine.ts', to: 'src/core/manager.ts', line: 3 },
      { from: 'src/core/manager.ts', to: 'src/core/loader.ts', line: 7 },
      { from: 'src/core/loader.ts', to: 'src/core/engine.ts', line: 2 },
      // … and edges that break layer rules.
      { from: 'src/families/whisper/model.ts', to: 'src/families/llama/chat.ts', line: 12 },
      { from: 'src/image/decode.ts', to: 'src/core/catalog.ts', line: 4 },
      { from: 'src/audio/containers/flac.ts', to: 'src/audio/encode/crc.ts', line: 1 },
      { from: 'src/compose.ts', to: 'src/families/whisper/model.ts', line: 9 },
      // Allowed: a family using a runtime, audio/ using core/errors, an encoder using a container's parser, cli/ using compose.
      { from: 'src/families/whisper/model.ts', to: 'src/runtimes/onnx/session.ts', line: 1 },
      { from: 'src/audio/encode/mp3-info.ts', to: 'src/audio/containers/mpeg.ts', line: 1 },
      { from: 'src/audio/decode.ts', to: 'src/core/errors.ts', line: 2 },
      { from: 'src/cli/main.ts', to: 'src/compose.ts', line: 5 },
      { from: 'src/compose.ts', to: 'src/families/whisper/index.ts', line: 8 },
    ];
    expect(findCycles(edges)).toEqual(['src/core/engine.ts → src/core/manager.ts → src/core/loader.ts → src/core/engine.ts']);
    expect(layerViolations(edges)).toEqual([
      'src/families/whisper/model.ts:12 → src/families/llama/chat.ts  (a family imports no other family and not the composition root)',
      'src/image/decode.ts:4 → src/core/catalog.ts  (audio/ and image/ import only themselves and core/errors.ts, core/units.ts)',
      'src/audio/containers/flac.ts:1 → src/audio/encode/crc.ts  (audio/containers/ and audio/decoders/ import nothing from audio/encode/)',
      'src/compose.ts:9 → src/families/whisper/model.ts  (the composition root imports a family only through its index.ts)',
    ]);
  });

  it('report realtime outside its home, a route importing a route, and core importing its tasks', () => {
    // The layout before realtime had one home: orchestration in api/realtime/ and core/realtime/, a route reading another's helper.
    const edges: Edge[] = [
      { from: 'src/core/realtime/reply.ts', to: 'src/core/tasks/chat.ts', line: 3 },
      { from: 'src/api/realtime/session.ts', to: 'src/core/tasks/chat.ts', line: 4 },
      { from: 'src/api/realtime/session.ts', to: 'src/core/engine.ts', line: 2, typeOnly: true },
      { from: 'src/http/routes/realtime.ts', to: 'src/http/routes/speech.ts', line: 10 },
      // A task reaching up into realtime/, and a route beside realtime's speaking its protocol.
      { from: 'src/core/tasks/speak.ts', to: 'src/realtime/reply.ts', line: 1 },
      { from: 'src/http/routes/speech.ts', to: 'src/api/realtime/ids.ts', line: 6 },
      // Allowed: the protocol naming the chat task's types and core's errors, realtime/ running tasks over it, the route carrying a session, the route table.
      { from: 'src/api/realtime/fields.ts', to: 'src/core/tasks/chat.ts', line: 2, typeOnly: true },
      { from: 'src/api/realtime/errors.ts', to: 'src/core/errors.ts', line: 2 },
      { from: 'src/realtime/session.ts', to: 'src/api/realtime/client-events.ts', line: 2 },
      { from: 'src/realtime/reply.ts', to: 'src/core/tasks/chat.ts', line: 3 },
      { from: 'src/realtime/session.ts', to: 'src/core/engine.ts', line: 4 },
      { from: 'src/http/routes/realtime.ts', to: 'src/realtime/session.ts', line: 5 },
      { from: 'src/http/routes/realtime.ts', to: 'src/api/realtime/server-events.ts', line: 4 },
      { from: 'src/http/routes/realtime.ts', to: 'src/http/reference-audio.ts', line: 9 },
      { from: 'src/http/routes/index.ts', to: 'src/http/routes/speech.ts', line: 16 },
    ];
    expect(layerViolations(edges)).toEqual([
      'src/core/realtime/reply.ts:3 → src/core/tasks/chat.ts  (core imports nothing from core/tasks)',
      'src/api/realtime/session.ts:4 → src/core/tasks/chat.ts  (api/realtime/ imports from core only errors.ts, and from core/tasks only types)',
      'src/api/realtime/session.ts:2 → src/core/engine.ts  (api/realtime/ imports from core only errors.ts, and from core/tasks only types)',
      'src/http/routes/realtime.ts:10 → src/http/routes/speech.ts  (a route imports no other route (routes/index.ts, their table, imports them all))',
      'src/core/tasks/speak.ts:1 → src/realtime/reply.ts  (only the adapters (cli/, http/) import realtime/)',
      'src/http/routes/speech.ts:6 → src/api/realtime/ids.ts  (api/realtime/ is imported only by realtime/ and http/routes/realtime.ts)',
    ]);
    expect(misplacedRealtime(['src/core/realtime/reply.ts', 'src/http/realtime-session.ts', 'src/realtime/session.ts', 'src/api/realtime/ids.ts', 'src/http/routes/realtime.ts', 'src/ui/voice-session.ts'])).toEqual([
      'src/core/realtime/reply.ts',
      'src/http/realtime-session.ts',
    ]);
  });
});
