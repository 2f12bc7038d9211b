import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function ocrCommand(): Command {
  return new Command('ocr')
    .description('Recognise text in images (PP-OCR).')
    .argument('<image...>', 'image files, globs, or - for stdin')
    .option('-m, --model <id>', 'OCR model', 'ppocr-v4-mobile')
    .option('--json', 'print the full JSON response')
    .addHelpText('after', '\nExamples:\n  $ lserve ocr receipt.png\n  $ lserve ocr --json scans/*.jpg')
    .action(() => notAvailableYet('ocr'));
}
