import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function listCommand(): Command {
  return new Command('list')
    .alias('ls')
    .description('List installed and bundled models.')
    .option('--all', 'the whole catalog, including models not pulled yet')
    .option('--json', 'machine-readable output')
    .addHelpText('after', '\nExamples:\n  $ lserve list\n  $ lserve list --all --json')
    .action(() => notAvailableYet('list'));
}
