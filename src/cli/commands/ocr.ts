import { Command } from 'commander';
import cliProgress from 'cli-progress';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { isLserveError } from '../../core/errors.js';
import { ocr, type OcrResult } from '../../core/tasks/ocr.js';
import { decodeImage, encodePng } from '../../image/decode.js';
import { drawPolygons } from '../../image/draw.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from '../errors.js';
import { expandInputs, readInput } from '../inputs.js';
import { collect, commandModel, createEngine, globalOptions } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';

interface OcrFlags {
  model?: string;
  json?: boolean;
  boxes?: boolean;
  output?: string;
  threads?: string;
  defaultModel?: string[];
}

export function ocrCommand(): Command {
  return new Command('ocr')
    .description('Recognise text in images (PP-OCR). Prints the text; --json prints lines, scores and boxes.')
    .argument('<image...>', 'image files (png, jpeg, webp, tiff, gif, bmp), globs, or - for stdin')
    .option('-m, --model <id>', 'OCR model (default: the default ocr model: ppocr-v5-server if pulled, else the bundled ppocr-v4-mobile)')
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--json', 'print the full JSON response (an array when several images are given)')
    .option('--boxes', 'write a copy of each image with the detected line boxes drawn on it')
    .option('-o, --output <path>', 'with --boxes: the output PNG (one image) or directory (several); default <name>.boxes.png here')
    .option('--threads <n>', 'CPU threads for inference (0 = all cores)')
    .addHelpText('after', '\nExamples:\n  $ lserve ocr receipt.png\n  $ lserve ocr --json "scans/*.jpg"\n  $ cat page.png | lserve ocr -\n  $ lserve ocr --boxes -o checked.png page.jpg')
    .action(async (patterns: string[], flags: OcrFlags, command: Command) => {
      if (flags.output && !flags.boxes) throw new CliError('-o/--output is only used with --boxes', EXIT_USAGE);
      const inputs = await expandInputs(patterns);
      const engine = createEngine(globalOptions(command), { threads: flags.threads, defaultModel: flags.defaultModel });
      const model = await commandModel(engine, 'ocr', flags.model, globalOptions(command));
      const results: Array<OcrResult & { file: string }> = [];
      let failed = 0;
      const bar = inputs.length > 1 && process.stderr.isTTY && !flags.json ? new cliProgress.SingleBar({ format: 'ocr {bar} {value}/{total} {file}', hideCursor: true, clearOnComplete: true, stream: process.stderr }, cliProgress.Presets.shades_classic) : undefined;
      bar?.start(inputs.length, 0, { file: '' });
      try {
        for (const [index, input] of inputs.entries()) {
          bar?.update(index, { file: path.basename(input) });
          try {
            const image = await readInput(input);
            const result = await ocr(engine, { model, image, param: input });
            results.push({ file: input, ...result });
            if (flags.boxes) await writeBoxes(image, result, boxesPath(input, flags.output, inputs.length));
            if (!flags.json) {
              bar?.stop();
              if (inputs.length > 1) process.stdout.write(`==> ${input} <==\n`);
              process.stdout.write(result.text ? `${result.text}\n` : '');
              bar?.start(inputs.length, index + 1, { file: '' });
            }
          } catch (error) {
            // A model problem is fatal for every file; a bad file only for itself.
            if (isLserveError(error) && (error.code === 'model_not_found' || error.code === 'wrong_model_kind')) throw error;
            failed++;
            bar?.stop();
            process.stderr.write(`lserve: ${input}: ${(error as Error).message}\n`);
            bar?.start(inputs.length, index + 1, { file: '' });
          }
        }
        bar?.update(inputs.length);
      } finally {
        bar?.stop();
        await engine.close();
      }
      if (flags.json) {
        const body = inputs.length === 1 ? results.map(({ file: _file, ...r }) => r)[0] : results;
        if (body !== undefined) process.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
      }
      if (failed > 0) throw new CliError(`${failed} of ${inputs.length} image${inputs.length === 1 ? '' : 's'} could not be processed`, EXIT_FAILURE);
    });
}

function boxesPath(input: string, output: string | undefined, count: number): string {
  const stem = input === '-' ? 'stdin' : path.basename(input, path.extname(input));
  if (!output) return `${stem}.boxes.png`;
  return count === 1 ? output : path.join(output, `${stem}.boxes.png`);
}

async function writeBoxes(image: Buffer, result: OcrResult, file: string): Promise<void> {
  const decoded = await decodeImage(image);
  await writeFile(file, await encodePng(drawPolygons(decoded, result.lines.map((l) => l.box))));
  process.stderr.write(`boxes: ${file}\n`);
}
