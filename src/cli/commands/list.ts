import { Command } from 'commander';
import path from 'node:path';
import { listingRow, listModels, type ModelListing } from '../../core/listing.js';
import type { ModelStore } from '../../core/store.js';
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
  return (await listModels(store, all)).map((listing) => rowOf(store, listing));
}

function rowOf(store: ModelStore, listing: ModelListing): ModelRow {
  const { id, installed, source } = listing;
  const files = installed ? Object.values(installed.files) : [];
  const where = !installed ? null : source === 'local' ? (files[0] ?? null) : source === 'bundled' ? (files[0] ? path.dirname(files[0]) : null) : store.modelDir(id);
  return { ...listingRow(listing), path: where, files: installed?.files ?? {} };
}
