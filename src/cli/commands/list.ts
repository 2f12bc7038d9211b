import { Command } from 'commander';
import path from 'node:path';
import { listingRow, listModels, type ModelListing } from '../../core/listing.js';
import type { ModelStore } from '../../core/store.js';
import { collect, createEngine, globalOptions } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';
import type { Engine } from '../../core/engine.js';
import { plainTable, type ModelRow } from '../views/model-table.js';

export function listCommand(): Command {
  return new Command('list')
    .alias('ls')
    .description('List installed and bundled models.')
    .option('--all', 'the whole catalog, including models not pulled yet')
    .option('--json', 'machine-readable output (an array of objects)')
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .addHelpText('after', '\nExamples:\n  $ lserve list\n  $ lserve list --all --json')
    .action(async (flags: { all?: boolean; json?: boolean; defaultModel?: string[] }, command: Command) => {
      const engine = createEngine(globalOptions(command), { defaultModel: flags.defaultModel });
      try {
        const rows = await collectRows(engine, Boolean(flags.all));
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

/** Installed and bundled models, each kind's default marked; with `all`, every catalog model too (not pulled, or partially). */
export async function collectRows(engine: Engine, all: boolean): Promise<ModelRow[]> {
  const defaults = new Set(Object.values(await engine.defaults()).map((pick) => pick.id));
  return (await listModels(engine.store, all)).map((listing) => ({ ...rowOf(engine.store, listing), ...(defaults.has(listing.id) ? { default: true as const } : {}) }));
}

function rowOf(store: ModelStore, listing: ModelListing): ModelRow {
  const { id, installed, source } = listing;
  const files = installed ? Object.values(installed.files) : [];
  const where = !installed ? null : source === 'local' ? (files[0] ?? null) : source === 'bundled' ? (files[0] ? path.dirname(files[0]) : null) : store.modelDir(id);
  return { ...listingRow(listing), path: where, files: installed?.files ?? {} };
}
