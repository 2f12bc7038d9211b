import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { decodeAudio } from '../../src/audio/decode.js';
import { CACHE, fmt, median, repeatedSpeech, resampleLinear, wavBytes, type Report } from './common.js';

/**
 * What decoding and resampling an upload to 16 kHz mono costs per audio
 * minute (src/audio/decode.ts's decodeAudio): WAV at 16 kHz mono (no
 * resampling: the floor), WAV at 44.1 kHz stereo (downmix + 44.1 → 16 kHz
 * sinc resampling), and MP3 at 44.1 kHz stereo, 128 kbit/s when ffmpeg is
 * installed to make one (generated once into bench/.cache; skipped, with a
 * note, without ffmpeg). Wall time and this process's CPU time, per minute.
 */

function hasFfmpeg(): boolean {
  return spawnSync('ffmpeg', ['-version'], { stdio: 'ignore' }).status === 0;
}

export async function decodeSection(report: Report, o: { runs: number; seconds: number }): Promise<void> {
  const minutes = o.seconds / 60;
  const speech = repeatedSpeech(o.seconds);
  const inputs: Array<[string, Buffer]> = [
    ['WAV 16 kHz mono (no resampling)', wavBytes(speech, 16_000, 1)],
    ['WAV 44.1 kHz stereo', wavBytes(resampleLinear(speech, 16_000, 44_100), 44_100, 2)],
  ];
  let mp3Note = '';
  if (hasFfmpeg()) {
    const wav = path.join(CACHE, `asr-speech-${o.seconds}s-44k-stereo.wav`);
    const mp3 = path.join(CACHE, `asr-speech-${o.seconds}s-44k-stereo-128k.mp3`);
    if (!existsSync(mp3)) {
      writeFileSync(wav, inputs[1]![1]);
      execFileSync('ffmpeg', ['-y', '-loglevel', 'error', '-i', wav, '-codec:a', 'libmp3lame', '-b:a', '128k', mp3]);
    }
    inputs.push(['MP3 44.1 kHz stereo 128 kbit/s', readFileSync(mp3)]);
  } else {
    mp3Note = 'MP3: skipped (no ffmpeg to make one; `apt-get install ffmpeg`)';
  }
  for (const [, bytes] of inputs) await decodeAudio(bytes, { sampleRate: 16_000 }); // warm-up: codec wasm compiled on first use
  const walls = new Map<string, number[]>();
  const cpus = new Map<string, number[]>();
  for (let i = 0; i < o.runs; i++) {
    for (const [label, bytes] of inputs) {
      const cpu = process.cpuUsage();
      const start = performance.now();
      await decodeAudio(bytes, { sampleRate: 16_000 });
      const wall = performance.now() - start;
      const used = process.cpuUsage(cpu);
      walls.set(label, [...(walls.get(label) ?? []), wall]);
      cpus.set(label, [...(cpus.get(label) ?? []), (used.user + used.system) / 1000]);
    }
  }
  report.section(`Decode + resample to 16 kHz mono (decodeAudio), ${o.seconds} s of speech.wav repeated, median of ${o.runs}, per audio minute:`);
  for (const [label] of inputs) {
    const wall = median(walls.get(label)!) / minutes;
    const cpu = median(cpus.get(label)!) / minutes;
    report.row(label, `${fmt(wall, 0)} ms/min`, `CPU ${fmt(cpu, 0)} ms/min; ${fmt((wall / 60_000) * 100, 2)} % of real time`);
  }
  if (mp3Note) report.note(mp3Note);
}
