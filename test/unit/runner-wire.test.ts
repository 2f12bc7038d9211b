import { describe, expect, it } from 'vitest';
import { InvalidRequestError, LserveError, OverloadedError } from '../../src/core/errors.js';
import { CROSSES_AS, decodeArgs, encodeArgs, fromWireError, toWireError, type CrossesAs } from '../../src/runtimes/runner/wire.js';

/** What crosses a runner's channel besides plain data: errors, functions, signals (structured clone is applied by Node's IPC). */

describe('errors across the channel', () => {
  it('come back as the same LserveError class, with status, type, code and param', () => {
    const back = fromWireError(structuredClone(toWireError(new InvalidRequestError('bad input', { param: 'input.3', code: 'context_length_exceeded' }))));
    expect(back).toBeInstanceOf(InvalidRequestError);
    expect(back).toBeInstanceOf(LserveError);
    expect(back).toMatchObject({ name: 'InvalidRequestError', message: 'bad input', status: 400, type: 'invalid_request_error', param: 'input.3', code: 'context_length_exceeded' });
    expect(fromWireError(toWireError(new OverloadedError()))).toBeInstanceOf(OverloadedError);
  });

  it('keep an abort an AbortError, and anything else an Error with its name and message', () => {
    const abort = fromWireError(toWireError(new DOMException('stopped', 'AbortError')));
    expect(abort).toBeInstanceOf(DOMException);
    expect(abort.name).toBe('AbortError');
    const plain = fromWireError(toWireError(new TypeError('not a function')));
    expect(plain).toBeInstanceOf(Error);
    expect(plain).toMatchObject({ name: 'TypeError', message: 'not a function' });
    expect(fromWireError(toWireError('a string'))).toMatchObject({ name: 'Error', message: 'a string' });
  });
});

describe('arguments across the channel', () => {
  it('turn functions into callback references and the AbortSignal into the call signal, leaving data as it is', async () => {
    const onAudio = (samples: Float32Array) => samples.length;
    const log = (line: string) => line;
    const signal = new AbortController().signal;
    const samples = new Float32Array([0.5, -0.5]);
    const seen: Array<(...args: unknown[]) => unknown> = [];
    let signalSeen: AbortSignal | undefined;
    const wire = encodeArgs(
      [{ text: 'hi', reference: { samples } }, onAudio, signal, { decoder: { decode: log, memoryBytes: 7 } }],
      (fn) => seen.push(fn),
      (s) => (signalSeen = s),
    );
    expect(seen).toEqual([onAudio, log]);
    expect(signalSeen).toBe(signal);
    const cloned = structuredClone(wire);
    const runnerSignal = new AbortController().signal;
    const calls: number[] = [];
    const [request, sink, callSignal, job] = decodeArgs(cloned, (reference) => async () => calls.push(reference), runnerSignal) as [
      { text: string; reference: { samples: Float32Array } },
      () => Promise<unknown>,
      AbortSignal,
      { decoder: { decode: () => Promise<unknown>; memoryBytes: number } },
    ];
    expect(request).toEqual({ text: 'hi', reference: { samples } });
    expect(request.reference.samples).toBeInstanceOf(Float32Array);
    expect(callSignal).toBe(runnerSignal);
    expect(job.decoder.memoryBytes).toBe(7);
    await sink();
    await job.decoder.decode();
    expect(calls).toEqual([1, 2]);
  });

  it("carry an object that says what it crosses as (a latent decoder's client handed to an image job) as that", async () => {
    class DecoderClient implements CrossesAs {
      readonly decoded: number[] = [];
      async decode(height: number): Promise<number> {
        this.decoded.push(height);
        return height * 2;
      }
      [CROSSES_AS]() {
        return { memoryBytes: 3, decode: (height: number) => this.decode(height) };
      }
    }
    const client = new DecoderClient();
    const seen: Array<(...args: unknown[]) => unknown> = [];
    const wire = encodeArgs([{ decoder: client }], (fn) => seen.push(fn), () => {});
    const [job] = decodeArgs(structuredClone(wire), (reference) => async (...args) => seen[reference - 1]!(...args), new AbortController().signal) as [{ decoder: { decode: (height: number) => Promise<number>; memoryBytes: number } }];
    expect(job.decoder.memoryBytes).toBe(3);
    expect(await job.decoder.decode(4)).toBe(8);
    expect(client.decoded).toEqual([4]);
  });

  it('refuse a class instance that structured clone would strip of its methods', () => {
    class Session {
      run(): number {
        return 1;
      }
    }
    expect(() => encodeArgs([{ session: new Session() }], () => 0, () => {})).toThrow(/a Session cannot be passed to a model in a runner process/);
  });
});
