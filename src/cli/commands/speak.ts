import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function speakCommand(): Command {
  return new Command('speak')
    .description('Synthesise speech from text (text to speech).')
    .argument('[text]', 'text to speak (default: stdin)')
    .option('-m, --model <id>', 'speech synthesis model')
    .option('--voice <name>', 'preset voice or speaker')
    .option('-o, --output <file>', 'write audio to this file', 'speech.wav')
    .addHelpText('after', '\nExamples:\n  $ lserve speak "Hello there" -o hello.wav\n  $ echo "Good morning" | lserve speak --voice Vivian')
    .action(() => notAvailableYet('speak'));
}
