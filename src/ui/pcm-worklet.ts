/**
 * AudioWorklet processor: the microphone as PCM16 chunks of 100 ms at the
 * context's rate (the page opens its AudioContext at 16 kHz, so the browser
 * resamples), posted with their RMS level for the meter.
 */

declare const sampleRate: number;
declare function registerProcessor(name: string, processor: unknown): void;
declare class AudioWorkletProcessor {
  readonly port: MessagePort;
}

class Pcm16Capture extends AudioWorkletProcessor {
  private buffer = new Int16Array(Math.round(sampleRate / 10));
  private filled = 0;
  private energy = 0;

  process(inputs: Float32Array[][]): boolean {
    const channel = inputs[0]?.[0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]!));
      this.buffer[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      this.energy += s * s;
      if (this.filled === this.buffer.length) this.flush();
    }
    return true;
  }

  private flush(): void {
    const pcm = this.buffer.slice(0, this.filled);
    this.port.postMessage({ pcm: pcm.buffer, rms: Math.sqrt(this.energy / Math.max(1, this.filled)) }, [pcm.buffer]);
    this.filled = 0;
    this.energy = 0;
  }
}

registerProcessor('pcm16-capture', Pcm16Capture);

export {};
