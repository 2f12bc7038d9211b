import { spawn, spawnSync } from 'node:child_process';
import { rename, rm, writeFile } from 'node:fs/promises';
import { Command, Option } from 'commander';
import { createEncoder } from '../../audio/encode/index.js';
import { SPEECH_FORMATS, type SpeechFormat } from '../../api/speech.js';
import type { Engine } from '../../core/engine.js';
import { audioInfo } from '../../core/tasks/audio-info.js';
import { defaultSpeechModel, prepareSpeech } from '../../core/tasks/speak.js';
import { collect, commandModel, createEngine, globalOptions, positiveInt } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';
import { CliError, EXIT_USAGE } from '../errors.js';
import { readInput } from '../inputs.js';

interface SpeakFlags {
  model?: string;
  voice?: string;
  speaker?: string;
  describe?: string;
  clone?: string;
  refText?: string;
  language?: string;
  speed?: string;
  seed?: string;
  frames?: string;
  output: string;
  format?: SpeechFormat;
  play?: boolean;
  listVoices?: boolean;
  threads?: string;
  defaultModel?: string[];
}

export function speakCommand(): Command {
  return new Command('speak')
    .description('Synthesise speech from text (text to speech): preset voices, a described voice, or a cloned one.')
    .argument('[text]', 'text to speak (default: stdin)')
    .option('-m, --model <id>', 'speech synthesis model (default: the default tts model)')
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--voice <name>', 'preset voice (speaker)')
    .option('--speaker <name>', 'preset speaker (same as --voice)')
    .option('--describe <text>', 'describe the voice in words (voice design models)')
    .option('--clone <audio>', 'reference recording of the voice to clone (voice clone models)')
    .option('--ref-text <text>', 'transcript of the --clone recording (better cloning)')
    .option('--language <name>', 'language (English, Chinese, … or en, zh, …); default auto')
    .option('--speed <x>', 'speech rate 0.25–4', '1')
    .option('--seed <n>', 'sampling seed: the same seed gives the same audio')
    .option('--frames <n>', 'most codec frames to generate (Qwen3-TTS: 12.5 per second)')
    .option('-o, --output <file>', 'audio file to write, or - for stdout', 'speech.wav')
    .addOption(new Option('-f, --format <format>', 'audio format (default: from the -o extension, else wav)').choices(SPEECH_FORMATS))
    .option('--play', 'also play the audio (ffplay, aplay, paplay or play, whichever is found)')
    .option('--list-voices', 'list the speakers and languages of the installed synthesis models (or of --model)')
    .option('--threads <n>', 'CPU threads for inference (0 = all cores)')
    .addHelpText(
      'after',
      '\nExamples:\n  $ lserve speak "Hello there" -o hello.wav\n  $ echo "Good morning" | lserve speak --voice Vivian --play\n  $ lserve speak -m qwen3-tts-voicedesign --describe "a warm, low voice" "Welcome back."\n  $ lserve speak -m qwen3-tts-voiceclone --clone me.wav --ref-text "What I said." "New words in my voice."\n  $ lserve speak --list-voices',
    )
    .action(async (text: string | undefined, flags: SpeakFlags, command: Command) => {
      const engine = createEngine(globalOptions(command), { threads: flags.threads, defaultModel: flags.defaultModel });
      try {
        if (flags.listVoices) await listVoices(engine, flags.model);
        else await speak(engine, text, { ...flags, model: await commandModel(engine, 'tts', flags.model, globalOptions(command)) });
      } finally {
        await engine.close();
      }
    });
}

async function speak(engine: Engine, text: string | undefined, flags: SpeakFlags): Promise<void> {
  const input = text ?? (process.stdin.isTTY ? '' : (await readInput('-')).toString('utf8'));
  if (!input.trim()) throw new CliError('give the text to speak as an argument or on stdin', EXIT_USAGE);
  const speed = Number(flags.speed);
  if (!(speed >= 0.25 && speed <= 4)) throw new CliError(`--speed must be between 0.25 and 4, got '${flags.speed}'`, EXIT_USAGE);
  const format = flags.format ?? formatOf(flags.output);
  const controller = new AbortController();
  process.once('SIGINT', () => controller.abort(new Error('interrupted')));
  const speech = await prepareSpeech(engine, {
    model: flags.model,
    input,
    voice: flags.voice,
    speaker: flags.speaker,
    voiceDescription: flags.describe,
    refAudio: flags.clone ? await readInput(flags.clone) : undefined,
    refText: flags.refText,
    language: flags.language,
    speed,
    seed: flags.seed === undefined ? undefined : positiveInt(flags.seed, '--seed', true),
    frames: flags.frames === undefined ? undefined : positiveInt(flags.frames, '--frames'),
  });
  const toStdout = flags.output === '-';
  const encoder = await createEncoder(format, speech.sampleRate, { streaming: toStdout });
  const chunks: Uint8Array[] = [];
  const out = (bytes: Uint8Array[]) => {
    if (toStdout) for (const chunk of bytes) process.stdout.write(chunk);
    else chunks.push(...bytes);
  };
  const progress = process.stderr.isTTY;
  const started = performance.now();
  let seconds = 0;
  const { samples } = await speech.run((block) => {
    out(encoder.write(block));
    seconds += block.length / speech.sampleRate;
    if (progress) process.stderr.write(`\r\x1b[2K${speech.model}: ${seconds.toFixed(1)} s of audio in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }, controller.signal);
  out(encoder.end());
  if (progress) process.stderr.write('\r\x1b[2K');
  const elapsed = (performance.now() - started) / 1000;
  const duration = samples / speech.sampleRate;
  if (!toStdout) {
    // Whole or not at all: a partial file never takes the name.
    const partial = `${flags.output}.part`;
    await writeFile(partial, Buffer.concat(chunks));
    await rename(partial, flags.output).catch(async (error) => {
      await rm(partial, { force: true });
      throw error;
    });
    process.stderr.write(`${flags.output}: ${duration.toFixed(2)} s of ${format} at ${speech.sampleRate} Hz, synthesised in ${elapsed.toFixed(1)} s (${(duration / elapsed).toFixed(2)}× real time)\n`);
    if (flags.play) await play(flags.output);
  }
}

function formatOf(file: string): SpeechFormat {
  const extension = /\.([a-z0-9]+)$/i.exec(file)?.[1]?.toLowerCase();
  if (extension === 'ogg') return 'opus';
  if (extension === 'raw') return 'pcm';
  return (SPEECH_FORMATS as readonly string[]).includes(extension ?? '') ? (extension as SpeechFormat) : 'wav';
}

/** Plays a file with the first player found on PATH; says so when there is none. */
async function play(file: string): Promise<void> {
  const players: Array<[string, string[]]> = [
    ['ffplay', ['-nodisp', '-autoexit', '-loglevel', 'error', file]],
    ['paplay', [file]],
    ['aplay', ['-q', file]],
    ['play', ['-q', file]],
    ['afplay', [file]],
  ];
  const found = players.find(([name]) => spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0);
  if (!found) {
    process.stderr.write('lserve: no audio player found (ffplay, paplay, aplay, play or afplay); the audio is in the file\n');
    return;
  }
  await new Promise<void>((resolve) => spawn(found[0], found[1], { stdio: 'inherit' }).on('close', () => resolve()));
}

async function listVoices(engine: Engine, model: string | undefined): Promise<void> {
  const ids = model ? [model] : (await engine.store.list()).filter((m) => m.entry.kind === 'tts').map((m) => m.id);
  if (ids.length === 0) await defaultSpeechModel(engine); // throws the "pull one" message
  for (const id of ids) {
    const info = await audioInfo(engine, id);
    const mode = info.voice_mode === 'design' ? ' (voice design: --describe)' : info.voice_mode === 'clone' ? ' (voice clone: --clone)' : '';
    process.stdout.write(`${info.model}${mode}\n`);
    if (info.supported_speakers?.length) process.stdout.write(`  speakers: ${info.supported_speakers.join(', ')}\n`);
    if (info.tts_supported_languages?.length) process.stdout.write(`  languages: auto, ${info.tts_supported_languages.join(', ')}\n`);
  }
}
