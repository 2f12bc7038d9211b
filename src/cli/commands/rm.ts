import { Command } from 'commander';
import { isLserveError } from '../../core/errors.js';
import { createEngine, globalOptions } from '../context.js';
import { formatBytes } from '../../core/units.js';
import { EXIT_FAILURE } from '../errors.js';

export function rmCommand(): Command {
  return new Command('rm')
    .alias('remove')
    .description('Remove installed models (and any partial download of them).')
    .argument('<model...>', 'model ids or aliases')
    .addHelpText('after', '\nFiles registered with `lserve pull ./file` are only unregistered, never deleted.\n\nExamples:\n  $ lserve rm qwen3-0.6b\n  $ lserve rm whisper-base my-model')
    .action(async (names: string[], _flags: object, command: Command) => {
      const engine = createEngine(globalOptions(command));
      let failed = 0;
      // Each name is handled on its own: one bad name does not keep the others installed.
      for (const name of names) {
        try {
          const installed = await engine.store.resolve(name);
          const id = installed?.id ?? engine.catalog.get(name)?.id ?? name;
          const partialBytes = await engine.store.partialBytes(id);
          const outcome = await engine.store.remove(name);
          if (outcome === 'installed') {
            process.stdout.write(installed?.source === 'local' ? `Unregistered ${id} (the file itself was kept)\n` : `Removed ${id}\n`);
          } else if (outcome === 'partial') {
            process.stdout.write(`Removed the partial download of ${id} (${formatBytes(partialBytes)}); it was never installed\n`);
          } else {
            failed++;
            process.stderr.write(`lserve: ${notInstalled(name)}\n`);
          }
        } catch (error) {
          if (!isLserveError(error)) throw error;
          failed++;
          process.stderr.write(`lserve: ${error.message}\n`);
        }
      }
      await engine.close();
      if (failed) process.exitCode = EXIT_FAILURE;
    });
}

/** The error for a name with nothing to remove, in the words every command uses for a model that is not installed. */
function notInstalled(name: string): string {
  return `'${name}' is not installed (run \`lserve list\` to see installed models)`;
}
