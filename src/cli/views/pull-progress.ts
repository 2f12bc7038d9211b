import cliProgress from 'cli-progress';
import type { PullEvent } from '../../core/download.js';
import { formatBytes } from '../../core/units.js';

/**
 * How `lserve pull` shows progress: a cli-progress bar per file on a
 * terminal, plain lines (every 10 % or 2 s) when piped, nothing with --quiet.
 * The download core emits an event per chunk; throttling is done here.
 */

export interface PullProgressView {
  onEvent(event: PullEvent): void;
  /** Prints a message without breaking the bars. */
  log(line: string): void;
  stop(): void;
}

export type ProgressMode = 'bars' | 'lines' | 'quiet';

export function progressMode(stream: NodeJS.WriteStream, quiet: boolean | undefined): ProgressMode {
  if (quiet) return 'quiet';
  return stream.isTTY ? 'bars' : 'lines';
}

export function createPullProgress(mode: ProgressMode, stream: NodeJS.WriteStream): PullProgressView {
  if (mode === 'bars') return barsView(stream);
  if (mode === 'lines') return linesView(stream);
  return { onEvent() {}, log() {}, stop() {} };
}

/** Download rate of one file, counting only bytes fetched by this run (not resumed ones). */
class Rate {
  private readonly started = Date.now();
  constructor(private readonly from: number) {}

  bytesPerSecond(received: number): number {
    const seconds = (Date.now() - this.started) / 1000;
    return seconds > 0.05 ? (received - this.from) / seconds : 0;
  }

  eta(received: number, total: number | undefined): string {
    const rate = this.bytesPerSecond(received);
    if (!total || rate <= 0) return '?';
    return formatDuration((total - received) / rate);
  }
}

export function formatDuration(seconds: number): string {
  if (seconds < 10) return `${Math.max(0, seconds).toFixed(1)}s`;
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

function sizeText(received: number, total: number | undefined): string {
  return total ? `${formatBytes(received)}/${formatBytes(total)}` : formatBytes(received);
}

function verifiedText(event: Extract<PullEvent, { type: 'file-done' }>): string {
  if (event.reused) return 'already downloaded';
  if (event.verifiedWith === 'catalog') return 'sha256 verified';
  if (event.verifiedWith === 'etag') return 'sha256 verified (hub ETag)';
  return 'no published checksum (sha256 recorded)';
}

function waitingText(event: Extract<PullEvent, { type: 'waiting' }>): string {
  return `Another lserve process (pid ${event.pid}) is pulling ${event.id}; waiting for it to finish…`;
}

function linesView(stream: NodeJS.WriteStream): PullProgressView {
  const write = (line: string) => stream.write(`${line}\n`);
  let rate = new Rate(0);
  let lastAt = 0;
  let lastStep = 0;
  return {
    log: write,
    stop() {},
    onEvent(event) {
      switch (event.type) {
        case 'waiting':
          return write(waitingText(event));
        case 'retry':
          return write(`${event.file}: ${event.message}; retrying (attempt ${event.attempt})`);
        case 'file-start': {
          rate = new Rate(event.resumedFrom);
          lastAt = Date.now();
          lastStep = event.totalBytes ? Math.floor((event.resumedFrom / event.totalBytes) * 10) : 0;
          const resumed = event.resumedFrom > 0 ? `, resuming at ${formatBytes(event.resumedFrom)}` : '';
          return write(`Downloading ${event.file} (${event.totalBytes ? formatBytes(event.totalBytes) : 'unknown size'}${resumed})`);
        }
        case 'progress': {
          const step = event.totalBytes ? Math.floor((event.receivedBytes / event.totalBytes) * 10) : 0;
          const now = Date.now();
          if (step <= lastStep && now - lastAt < 2000) return;
          if (event.receivedBytes === event.totalBytes) return; // file-done reports completion
          lastStep = step;
          lastAt = now;
          const pct = event.totalBytes ? `${String(Math.floor((event.receivedBytes / event.totalBytes) * 100)).padStart(3)}%  ` : '';
          const speed = `${formatBytes(rate.bytesPerSecond(event.receivedBytes))}/s`;
          return write(`  ${event.file}  ${pct}${sizeText(event.receivedBytes, event.totalBytes)}  ${speed}  ETA ${rate.eta(event.receivedBytes, event.totalBytes)}`);
        }
        case 'file-done':
          return write(`  ${event.file}  done  ${formatBytes(event.sizeBytes)}  ${verifiedText(event)}`);
      }
    },
  };
}

function barsView(stream: NodeJS.WriteStream): PullProgressView {
  const multibar = new cliProgress.MultiBar(
    {
      stream,
      // Narrow enough for an 80-column terminal with a long file name.
      // {eta} is cli-progress's own token (seconds); ours is {remaining}.
      format: ' {file} |{bar}| {percentage}% {size} {speed} {remaining}',
      barsize: 24,
      barCompleteChar: '█',
      barIncompleteChar: '░',
      hideCursor: true,
      autopadding: true,
      fps: 10,
    },
    cliProgress.Presets.shades_classic,
  );
  const bars = new Map<string, { bar: cliProgress.SingleBar; rate: Rate; total: number | undefined; lastAt: number }>();
  const payload = (file: string, received: number, total: number | undefined, rate: Rate, done?: string) => ({
    file,
    size: sizeText(received, total),
    speed: done ? '' : `${formatBytes(rate.bytesPerSecond(received))}/s`,
    remaining: done ? done : `ETA ${rate.eta(received, total)}`,
  });
  return {
    log: (line) => multibar.log(`${line}\n`),
    stop: () => multibar.stop(),
    onEvent(event) {
      switch (event.type) {
        case 'waiting':
          return multibar.log(`${waitingText(event)}\n`);
        case 'retry':
          return multibar.log(`${event.file}: ${event.message}; retrying (attempt ${event.attempt})\n`);
        case 'file-start': {
          const rate = new Rate(event.resumedFrom);
          // Unknown length: a total of 0 would divide by zero; the bar stays empty until done.
          const bar = multibar.create(event.totalBytes ?? 1, event.totalBytes ? event.resumedFrom : 0, payload(event.file, event.resumedFrom, event.totalBytes, rate));
          bars.set(event.file, { bar, rate, total: event.totalBytes, lastAt: 0 });
          return;
        }
        case 'progress': {
          const state = bars.get(event.file);
          if (!state) return;
          const now = Date.now();
          // Formatting the payload per chunk is wasted work; the bar redraws at 10 fps anyway.
          if (now - state.lastAt < 100) return;
          state.lastAt = now;
          state.bar.update(state.total ? event.receivedBytes : 0, payload(event.file, event.receivedBytes, state.total, state.rate));
          return;
        }
        case 'file-done': {
          const state = bars.get(event.file);
          if (!state) {
            multibar.log(`${event.file}: ${verifiedText(event)}\n`);
            return;
          }
          state.bar.setTotal(event.sizeBytes);
          state.bar.update(event.sizeBytes, payload(event.file, event.sizeBytes, event.sizeBytes, state.rate, event.verifiedWith ? 'done, sha256 verified' : 'done'));
          return;
        }
      }
    },
  };
}
