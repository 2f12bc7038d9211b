import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function rmCommand(): Command {
  return new Command('rm')
    .description('Remove an installed model.')
    .argument('<model...>', 'model ids')
    .addHelpText('after', '\nExamples:\n  $ lserve rm qwen3-0.6b')
    .action(() => notAvailableYet('rm'));
}
