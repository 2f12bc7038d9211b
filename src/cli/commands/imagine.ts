import { Command, Option } from 'commander';
import cliProgress from 'cli-progress';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { generateImages, type ImageRequest } from '../../core/tasks/image.js';
import { OUTPUT_FORMATS, type OutputFormat } from '../../image/rgba.js';
import { collect, commandModel, createEngine, globalOptions, positiveInt } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';
import { CliError, EXIT_USAGE } from '../errors.js';
import { readInput } from '../inputs.js';

interface ImagineFlags {
  output?: string;
  model?: string;
  size?: string;
  steps?: string;
  seed?: string;
  n?: string;
  init?: string;
  strength?: string;
  mask?: string;
  negative?: string;
  guidance?: string;
  vae?: string;
  format?: OutputFormat;
  quality?: string;
  threads?: string;
  defaultModel?: string[];
}

export function imagineCommand(): Command {
  return new Command('imagine')
    .description('Generate images from a prompt (Stable Diffusion: SD-Turbo), or repaint one: --init for image to image, --init with --mask to inpaint.')
    .argument('<prompt>', 'what the image shows')
    .option('-o, --output <file>', 'output file (-n > 1: numbered, out-1.png, out-2.png, …); default lserve-<seed>.<format> here')
    .option('-m, --model <id>', 'image model (default: the default image model)')
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--size <WxH>', "image size, each side a multiple of 64 in the model's range (default 512x512; with --init, the image's own size)")
    .option('--steps <n>', 'denoising steps (SD-Turbo: 1 to 4, default 1)')
    .option('--seed <n>', 'seed of the first image (later ones use seed+1, …); the same seed gives the same image')
    .option('-n <count>', 'number of images, 1 to 4', '1')
    .option('--init <image>', 'start from this image (png, jpeg, webp, …; - for stdin)')
    .option('--strength <0-1>', 'with --init: how much to repaint, 0 keeps the image, 1 ignores it (default 0.5)')
    .option('--mask <image>', 'with --init: repaint only where this mask is transparent (or white, for a mask without alpha)')
    .option('--negative <prompt>', 'what to steer away from (used only with --guidance above 1)')
    .option('--guidance <scale>', 'classifier-free guidance scale (SD-Turbo: 0, none)')
    .option('--vae <id>', 'decode with this latent decoder instead of the full VAE (e.g. taesd: much faster, less detail)')
    .addOption(new Option('--format <format>', 'image format (default: from the -o extension, else png)').choices(OUTPUT_FORMATS))
    .option('--quality <0-100>', 'JPEG/WebP quality (default 90)')
    .option('--threads <n>', 'CPU threads for inference (0 = all cores)')
    .addHelpText(
      'after',
      [
        '',
        'Examples:',
        '  $ lserve imagine "a lighthouse at dusk, oil painting" -o lighthouse.png',
        '  $ lserve imagine "a red fox" -n 4 --seed 7 --steps 2 -o fox.png',
        '  $ lserve imagine "the same photo, in winter" --init photo.jpg --strength 0.6 -o winter.png',
        '  $ lserve imagine "a vase of tulips" --init table.png --mask hole.png -o tulips.png',
      ].join('\n'),
    )
    .action(async (prompt: string, flags: ImagineFlags, command: Command) => {
      const engine = createEngine(globalOptions(command), { threads: flags.threads, defaultModel: flags.defaultModel });
      const request = { ...(await requestOf(prompt, flags)), model: await commandModel(engine, 'image', flags.model, globalOptions(command)) };
      const n = request.n ?? 1;
      const bar = process.stderr.isTTY
        ? new cliProgress.SingleBar({ format: 'imagine {bar} {image} step {step}/{steps}', hideCursor: true, clearOnComplete: true, stream: process.stderr }, cliProgress.Presets.shades_classic)
        : undefined;
      const controller = new AbortController();
      const onSigint = () => controller.abort(new Error('interrupted'));
      process.once('SIGINT', onSigint);
      let result;
      try {
        let started = false;
        result = await generateImages(engine, request, {
          signal: controller.signal,
          onProgress: ({ image, images, step, steps }) => {
            if (!bar) return;
            const total = images * (steps + 1);
            if (!started) bar.start(total, 0, { image: '', step: 0, steps });
            started = true;
            bar.update(image * (steps + 1) + step, { image: images > 1 ? `image ${image + 1}/${images}` : '', step, steps });
          },
        });
      } finally {
        bar?.stop();
        process.off('SIGINT', onSigint);
        await engine.close();
      }
      for (const [i, image] of result.images.entries()) {
        const file = outputPath(flags.output, image.format, image.seed, i, n);
        await writeFile(file, image.data);
        process.stdout.write(`${file}  ${image.width}x${image.height}  seed ${image.seed}\n`);
      }
      if (result.revisedPrompt !== undefined) process.stderr.write(`note: the prompt was cut to what the model reads (77 tokens): "${result.revisedPrompt}"\n`);
    });
}

async function requestOf(prompt: string, flags: ImagineFlags): Promise<ImageRequest> {
  const number = (value: string | undefined, flag: string, min: number, max: number): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isFinite(n) || n < min || n > max) throw new CliError(`${flag} must be a number from ${min} to ${max}, got '${value}'`, EXIT_USAGE);
    return n;
  };
  const integer = (value: string | undefined, flag: string) => (value === undefined ? undefined : positiveInt(value, flag, true));
  if ((flags.strength !== undefined || flags.mask !== undefined) && flags.init === undefined) throw new CliError('--strength and --mask need --init <image>', EXIT_USAGE);
  if (flags.strength !== undefined && flags.mask !== undefined) throw new CliError('--strength applies to image to image; with --mask the masked part is repainted in full', EXIT_USAGE);
  const format = flags.format ?? formatOf(flags.output);
  const request: ImageRequest = {
    model: flags.model,
    prompt,
    negativePrompt: flags.negative,
    n: integer(flags.n, '-n'),
    size: flags.size,
    steps: integer(flags.steps, '--steps'),
    seed: integer(flags.seed, '--seed'),
    guidanceScale: number(flags.guidance, '--guidance', 0, 30),
    outputFormat: format,
    outputCompression: integer(flags.quality, '--quality'),
    vae: flags.vae,
  };
  if (flags.init !== undefined) {
    const image = await readFile(flags.init);
    if (flags.mask !== undefined) request.edit = { image, param: flags.init, mask: await readFile(flags.mask), maskParam: flags.mask };
    else request.init = { image, param: flags.init, strength: number(flags.strength, '--strength', 0, 1) ?? 0.5 };
  }
  return request;
}

async function readFile(file: string): Promise<Buffer> {
  try {
    return await readInput(file);
  } catch (error) {
    throw new CliError(`${file}: ${(error as Error).message}`);
  }
}

function formatOf(output: string | undefined): OutputFormat | undefined {
  const ext = output ? path.extname(output).slice(1).toLowerCase() : '';
  if (ext === 'jpg' || ext === 'jpeg') return 'jpeg';
  if (ext === 'png' || ext === 'webp') return ext;
  return undefined;
}

function outputPath(output: string | undefined, format: OutputFormat, seed: number, index: number, count: number): string {
  const ext = format === 'jpeg' ? 'jpg' : format;
  if (!output) return `lserve-${seed}.${ext}`;
  if (count === 1) return output;
  const parsed = path.parse(output);
  return path.join(parsed.dir, `${parsed.name}-${index + 1}${parsed.ext || `.${ext}`}`);
}
