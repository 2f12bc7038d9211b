import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function transcribeCommand(): Command {
  return new Command('transcribe')
    .description('Transcribe an audio file to text (speech to text).')
    .argument('<audio...>', 'audio files (wav, mp3, flac, ogg)')
    .option('-m, --model <id>', 'speech recognition model')
    .option('--language <code>', 'language code, or auto')
    .option('--json', 'print the full JSON response')
    .addHelpText('after', '\nExamples:\n  $ lserve transcribe meeting.wav\n  $ lserve transcribe --language en --json call.mp3')
    .action(() => notAvailableYet('transcribe'));
}
