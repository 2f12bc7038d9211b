import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';

/**
 * The one thread plan for every ONNX Runtime session lserve makes.
 *
 * Each session has an intra-op pool of its own, so thread counts only add up
 * across sessions that compute at the same moment; more threads computing
 * than cores makes every op wait for its slowest, descheduled thread. So:
 * - the budget is the machine's cores: `--threads` when given, else the
 *   physical cores this process may run on (what ONNX Runtime itself
 *   defaults to: a core's second hardware thread adds little to its math);
 * - sessions that run one after another each get the whole budget, since one
 *   computes at a time: a pipeline's stages (Whisper's encoder then decoder,
 *   PP-OCR's detector then recognizer, the Qwen3-TTS talker, code predictor
 *   and embeddings in their worker);
 * - concurrent requests do not multiply it: a session runs one call at a
 *   time (OnnxSession queues them, a Qwen3-TTS model runs one generation at
 *   a time), so a second request waits for the cores instead of adding
 *   threads that fight over them;
 * - a stage that runs beside another of its pipeline (the Qwen3-TTS codec
 *   decoder, decoding a block while the frame loop makes the next) gets the
 *   budget as well. Giving it less was measured (2 cores, a decoder of the
 *   real one's arithmetic; bench/tts.md): with 1 thread beside the loop's
 *   2 the real-time factor hardly changed (14 paired runs: median ratio
 *   0.98, spread 0.68–1.40 on a shared machine) and the first audio came
 *   0.3–1.4 s later in 13 of 14: ORT's idle threads sleep, so the overlap
 *   costs little, and the scheduler shares the cores by runnable threads, so
 *   fewer threads mainly gave the first block's decode a smaller share;
 * - inter-op threads: 1 (sequential execution: the parallelism is inside ops).
 */

/** Intra-op threads for sessions that run one after another: `requested` (--threads) when positive, else the machine's cores. */
export function machineThreads(requested: number): number {
  return requested > 0 ? requested : machineCores();
}

let cores: number | undefined;

/** Physical cores among the CPUs this process may use (Linux topology), else the CPUs it may use. */
export function machineCores(): number {
  cores ??= Math.max(1, Math.min(os.availableParallelism(), physicalCores() ?? Number.POSITIVE_INFINITY));
  return cores;
}

/** Distinct sets of hardware threads that share a core, from sysfs; undefined where there is none (not Linux). */
function physicalCores(): number | undefined {
  try {
    const root = '/sys/devices/system/cpu';
    const siblings = new Set<string>();
    for (const name of readdirSync(root)) {
      if (!/^cpu\d+$/.test(name)) continue;
      try {
        siblings.add(readFileSync(`${root}/${name}/topology/thread_siblings_list`, 'utf8').trim());
      } catch {
        // An offline CPU has no topology.
      }
    }
    return siblings.size || undefined;
  } catch {
    return undefined;
  }
}
