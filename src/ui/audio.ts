/** Microphone capture as PCM16, WAV files, playing PCM as it streams in, and the length of a clip. */
import { pcm16ToFloat32, PlaybackSchedule, SampleJoiner } from './pcm.js';

export interface Capture {
  readonly sampleRate: number;
  stop(): Promise<void>;
}

/**
 * Opens the microphone at `sampleRate` (the browser resamples) and hands over
 * 100 ms PCM16 chunks with their level. The audio comes unprocessed, except
 * with `echoCancellation` (for a conversation whose answers play from the
 * speakers, which the microphone would otherwise hear as the user).
 */
export async function captureMicrophone(onChunk: (pcm: Int16Array, rms: number) => void, sampleRate = 16_000, { echoCancellation = false } = {}): Promise<Capture> {
  if (!navigator.mediaDevices?.getUserMedia) throw new Error('this browser gives no microphone access here (it needs the page on localhost, 127.0.0.1 or HTTPS)');
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation, noiseSuppression: false, autoGainControl: false } });
  const context = new AudioContext({ sampleRate });
  try {
    await context.audioWorklet.addModule('/ui/pcm-worklet.js');
  } catch (error) {
    stream.getTracks().forEach((t) => t.stop());
    await context.close();
    throw error;
  }
  const source = context.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(context, 'pcm16-capture', { numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1 });
  node.port.onmessage = (e: MessageEvent<{ pcm: ArrayBuffer; rms: number }>) => onChunk(new Int16Array(e.data.pcm), e.data.rms);
  // A node is only processed while connected towards the destination: through a muted gain, so nothing is heard.
  const mute = context.createGain();
  mute.gain.value = 0;
  source.connect(node).connect(mute).connect(context.destination);
  await context.resume();
  let stopped: Promise<void> | undefined;
  return {
    sampleRate: context.sampleRate,
    stop() {
      stopped ??= (async () => {
        stream.getTracks().forEach((t) => t.stop());
        source.disconnect();
        node.port.onmessage = null;
        await context.close();
      })();
      return stopped;
    },
  };
}

/** A mono 16-bit WAV file of these chunks. */
export function wavBlob(chunks: readonly Int16Array[], sampleRate: number): Blob {
  const samples = chunks.reduce((n, c) => n + c.length, 0);
  const header = new DataView(new ArrayBuffer(44));
  const text = (at: number, s: string) => [...s].forEach((ch, i) => header.setUint8(at + i, ch.charCodeAt(0)));
  text(0, 'RIFF');
  header.setUint32(4, 36 + samples * 2, true);
  text(8, 'WAVE');
  text(12, 'fmt ');
  header.setUint32(16, 16, true);
  header.setUint16(20, 1, true);
  header.setUint16(22, 1, true);
  header.setUint32(24, sampleRate, true);
  header.setUint32(28, sampleRate * 2, true);
  header.setUint16(32, 2, true);
  header.setUint16(34, 16, true);
  text(36, 'data');
  header.setUint32(40, samples * 2, true);
  return new Blob([header.buffer, ...chunks.map((c) => c.slice().buffer)], { type: 'audio/wav' });
}

/**
 * Plays PCM16 mono as it arrives: each piece is scheduled right after the
 * previous one on one AudioContext clock (PlaybackSchedule), so audio starts
 * with the first bytes and plays gap-free while the rest is still being made.
 * Pieces may name the item they belong to, and `interrupt` stops everything
 * at once, telling how much of the item then playing was heard.
 */
export class PcmPlayer {
  private readonly context: AudioContext;
  private readonly schedule = new PlaybackSchedule();
  private readonly joiner = new SampleJoiner();
  private readonly sources = new Set<AudioBufferSourceNode>();
  /** The audio received, for `wav()`; not kept with `keep: false` (a long conversation would pile it up). */
  readonly chunks: Int16Array[] = [];
  private readonly keep: boolean;
  /** Seconds of audio received (and scheduled). */
  seconds = 0;

  constructor(
    readonly sampleRate: number,
    { keep = true } = {},
  ) {
    this.context = new AudioContext({ sampleRate });
    this.keep = keep;
  }

  get state(): AudioContextState {
    return this.context.state;
  }

  /** Seconds played so far. */
  get played(): number {
    return this.schedule.played(this.context.currentTime);
  }

  /** Whether audio is still to be heard. */
  get playing(): boolean {
    return this.schedule.playing(this.context.currentTime);
  }

  /** Schedules the whole samples in `bytes` (a half sample at the end waits for the next piece). */
  push(bytes: Uint8Array, item?: string): void {
    const data = this.joiner.push(bytes);
    if (!data.length) return;
    if (this.keep) this.chunks.push(new Int16Array(data.slice().buffer));
    const samples = pcm16ToFloat32(data);
    const buffer = this.context.createBuffer(1, samples.length, this.sampleRate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    source.start(this.schedule.add(buffer.duration, this.context.currentTime, item));
    this.seconds += buffer.duration;
    this.sources.add(source);
    source.onended = () => this.sources.delete(source);
  }

  /** Stops all audio now. Returns the item that was playing (or due) and the seconds of it heard; undefined when all had been heard. */
  interrupt(): { item: string; seconds: number } | undefined {
    const now = this.context.currentTime;
    const item = this.schedule.current(now);
    const heard = item === undefined ? undefined : { item, seconds: this.schedule.played(now, item) };
    for (const s of this.sources) s.stop();
    this.sources.clear();
    this.schedule.clear();
    return heard;
  }

  /** Resolves when everything scheduled has played. */
  async drained(): Promise<void> {
    while (this.context.state === 'running' && this.playing) {
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  wav(): Blob {
    return wavBlob(this.chunks, this.sampleRate);
  }

  async close(): Promise<void> {
    for (const s of this.sources) s.stop();
    if (this.context.state !== 'closed') await this.context.close();
  }
}

/** The length of the audio at `url` as the browser reads it; undefined when it cannot. */
export function audioSeconds(url: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const audio = new Audio();
    audio.preload = 'metadata';
    audio.onloadedmetadata = () => resolve(Number.isFinite(audio.duration) ? audio.duration : undefined);
    audio.onerror = () => resolve(undefined);
    audio.src = url;
  });
}
