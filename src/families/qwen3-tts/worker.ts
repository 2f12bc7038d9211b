import { parentPort } from 'node:worker_threads';
import { FrameGenerator, type GenerateRequest, type GeneratorInit } from './generator.js';
import { PromptError } from './prompt.js';

/**
 * Entry of the generator worker: one FrameGenerator, driven by messages from
 * GeneratorWorker (worker-client.ts). Frames stream back as they are made; an
 * abort arrives through a shared flag that the loop reads every frame, without
 * waiting for a message to be delivered.
 */

type Request =
  | { id: number; type: 'init'; init: GeneratorInit }
  | { id: number; type: 'reference'; samples: Float32Array; withCodes: boolean }
  | { id: number; type: 'generate'; request: GenerateRequest; abort: SharedArrayBuffer; hold?: SharedArrayBuffer }
  | { id: number; type: 'release' };

const port = parentPort!;
let generator: FrameGenerator | undefined;

function ready(): FrameGenerator {
  if (!generator) throw new Error('the generator is not initialised');
  return generator;
}

port.on('message', async (message: Request) => {
  const { id } = message;
  try {
    if (message.type === 'init') {
      generator = await FrameGenerator.create(message.init);
      port.postMessage({ id, ok: true, result: { graphNotes: generator.graphNotes, loop: generator.loop } });
    } else if (message.type === 'reference') {
      const result = await ready().encodeReference(message.samples, message.withCodes);
      port.postMessage({ id, ok: true, result }, [result.xvector.buffer as ArrayBuffer, ...result.frames.map((f) => f.buffer as ArrayBuffer)]);
    } else if (message.type === 'generate') {
      const flag = new Int32Array(message.abort);
      const held = message.hold && new Int32Array(message.hold);
      const aborted = () => {
        // Held (LoopHold): wait, re-reading the abort flag every 20 ms.
        while (held && Atomics.load(held, 0) === 1 && Atomics.load(flag, 0) === 0) Atomics.wait(held, 0, 1, 20);
        return Atomics.load(flag, 0) !== 0;
      };
      const result = await ready().generate(message.request, (codes) => port.postMessage({ id, update: codes }, [codes.buffer as ArrayBuffer]), aborted);
      port.postMessage({ id, ok: true, result });
    } else if (message.type === 'release') {
      await generator?.release();
      generator = undefined;
      port.postMessage({ id, ok: true });
    }
  } catch (error) {
    const param = error instanceof PromptError ? error.param : undefined;
    port.postMessage({ id, ok: false, error: error instanceof Error ? error.message : String(error), param });
  }
});
