import { Command, Option } from 'commander';
import cliProgress from 'cli-progress';
import { writeFile } from 'node:fs/promises';
import { isLserveError } from '../../core/errors.js';
import { transcribe } from '../../core/tasks/transcribe.js';
import { formatTranscription, RESPONSE_FORMATS, type ResponseFormat } from '../../core/tasks/transcribe/formats.js';
import { pcm16ToFloat32 } from '../../audio/pcm.js';
import type { StreamingRecognizer } from '../../core/tasks/transcribe/streaming.js';
import type { Engine } from '../../core/engine.js';
import { collect, commandModel, createEngine, globalOptions } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from '../errors.js';
import { expandInputs, readInput } from '../inputs.js';

interface TranscribeFlags {
  model?: string;
  language?: string;
  format: ResponseFormat;
  prompt?: string;
  temperature?: string;
  output?: string;
  threads?: string;
  defaultModel?: string[];
  stream?: boolean;
  wordTimestamps?: boolean;
}

export function transcribeCommand(): Command {
  return new Command('transcribe')
    .description('Transcribe audio files to text (speech to text, Whisper).')
    .argument('[audio...]', 'audio files (wav, mp3, flac, ogg/opus, webm, m4a), globs, or - for stdin')
    .option('-m, --model <id>', 'speech recognition model (default: the default asr model; with --stream, asr-stream)')
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--language <code>', 'language code, or auto to detect it', 'auto')
    .addOption(new Option('-f, --format <format>', 'output format').choices(RESPONSE_FORMATS).default('text'))
    .option('--prompt <text>', 'text that guides spelling and style (names, terms)')
    .option('--temperature <t>', 'sampling temperature 0–1 (0: greedy with fallback)')
    .option('-o, --output <file>', 'write the result to a file instead of stdout (one input)')
    .option('--word-timestamps', 'also time every word (--format verbose_json; a "-timestamped" Whisper model)')
    .option('--threads <n>', 'CPU threads for inference (0 = all cores)')
    .option('--stream', 'live captions: raw PCM16 LE 16 kHz mono on stdin, partials updated in place, finals on their own lines (a streaming model)')
    .addHelpText(
      'after',
      '\nExamples:\n  $ lserve transcribe meeting.wav\n  $ lserve transcribe --format srt -o talk.srt talk.mp3\n  $ cat call.ogg | lserve transcribe --language en -\n  $ arecord -f S16_LE -r 16000 -c 1 | lserve transcribe --stream',
    )
    .action(async (patterns: string[], flags: TranscribeFlags, command: Command) => {
      if (flags.stream) {
        if (patterns.length > 0) throw new CliError('--stream reads PCM from stdin; give no files', EXIT_USAGE);
        const engine = createEngine(globalOptions(command), { threads: flags.threads, defaultModel: flags.defaultModel });
        try {
          await streamCaptions(engine, await commandModel(engine, 'asr-stream', flags.model, globalOptions(command)));
        } finally {
          await engine.close();
        }
        return;
      }
      if (patterns.length === 0) throw new CliError('give audio files, or - for stdin (or --stream for live PCM)', EXIT_USAGE);
      const temperature = flags.temperature === undefined ? undefined : Number(flags.temperature);
      if (temperature !== undefined && !(temperature >= 0 && temperature <= 1)) throw new CliError(`--temperature must be between 0 and 1, got '${flags.temperature}'`, EXIT_USAGE);
      const inputs = await expandInputs(patterns);
      if (flags.output && inputs.length > 1) throw new CliError('-o/--output takes one input', EXIT_USAGE);
      if (flags.wordTimestamps && flags.format !== 'verbose_json') throw new CliError('--word-timestamps needs --format verbose_json (the only format with words)', EXIT_USAGE);
      const engine = createEngine(globalOptions(command), { threads: flags.threads, defaultModel: flags.defaultModel });
      let failed = 0;
      try {
        const model = await commandModel(engine, 'asr', flags.model, globalOptions(command));
        for (const input of inputs) {
          const bar = process.stderr.isTTY ? new cliProgress.SingleBar({ format: `${input} {bar} {percentage}%`, hideCursor: true, clearOnComplete: true, stream: process.stderr }, cliProgress.Presets.shades_classic) : undefined;
          try {
            const audio = await readInput(input);
            bar?.start(1, 0);
            const result = await transcribe(
              engine,
              { model, audio, param: input, language: flags.language, prompt: flags.prompt, temperature, wordTimestamps: flags.wordTimestamps, onProgress: (done, total) => bar?.update(done / total) },
              new AbortController().signal,
            );
            bar?.stop();
            const { body } = formatTranscription(result, flags.format);
            if (flags.output) await writeFile(flags.output, body);
            else process.stdout.write(`${inputs.length > 1 ? `==> ${input} <==\n` : ''}${body.endsWith('\n') ? body : `${body}\n`}`);
          } catch (error) {
            bar?.stop();
            // A model problem is fatal for every file; a bad file only for itself.
            if (isLserveError(error) && (error.code === 'model_not_found' || error.code === 'wrong_model_kind' || error.param === 'model' || error.param === 'timestamp_granularities')) throw error;
            failed++;
            process.stderr.write(`lserve: ${input}: ${(error as Error).message}\n`);
          }
        }
      } finally {
        await engine.close();
      }
      if (failed > 0) throw new CliError(`${failed} of ${inputs.length} file${inputs.length === 1 ? '' : 's'} could not be transcribed`, EXIT_FAILURE);
    });
}

/** Live captions from stdin: each partial rewrites the current line, each final ends it. */
async function streamCaptions(engine: Engine, model: string): Promise<void> {
  const lease = await engine.acquire<StreamingRecognizer>(model, ['asr-stream']);
  const stream = lease.model.open();
  const tty = process.stdout.isTTY;
  let shown = '';
  const done = new Promise<void>((resolve, reject) => {
    stream.on('result', ({ text, isFinal }) => {
      if (isFinal) {
        if (text || shown) process.stdout.write(`${tty ? '\r\x1b[2K' : ''}${text}\n`);
        shown = '';
      } else if (tty && text !== shown) {
        process.stdout.write(`\r\x1b[2K${text}`);
        shown = text;
      }
    });
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  try {
    let odd: Buffer | undefined;
    for await (const chunk of process.stdin) {
      // PCM16 samples may straddle stdin's chunks: carry an odd byte to the next one.
      let bytes = odd ? Buffer.concat([odd, chunk as Buffer]) : (chunk as Buffer);
      odd = bytes.length % 2 ? bytes.subarray(bytes.length - 1) : undefined;
      if (odd) bytes = bytes.subarray(0, bytes.length - 1);
      if (!stream.push(pcm16ToFloat32(bytes))) await new Promise<void>((resolve) => stream.on('drain', resolve));
    }
    stream.finish();
    await done;
  } finally {
    stream.close();
    lease.release();
  }
}
