import { afterEach, describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../../src/core/errors.js';
import { ResponseStore, type StoredResponse } from '../../src/core/responses/store.js';

/** The response store's contract (any implementation of src/core/responses/store.ts must pass it). */

const options = { ttlSeconds: 3600, maxResponses: 3, maxBytesPerResponse: 4096 };
let store: ResponseStore;

afterEach(() => store?.close());

function entry(id: string, previousResponseId: string | null = null, extra: Partial<StoredResponse> = {}): StoredResponse {
  const input = [{ id: `${id}_in1`, type: 'message' }, { id: `${id}_in2`, type: 'message' }, { id: `${id}_in3`, type: 'message' }];
  return { id, model: 'm', createdAt: Math.floor(Date.now() / 1000), previousResponseId, input, output: [{ id: `${id}_out`, type: 'message' }], response: { id }, ...extra };
}

describe('ResponseStore', () => {
  it('stores, reads back a copy, and deletes', () => {
    store = ResponseStore.open(':memory:', options);
    store.put(entry('a'));
    const read = store.get('a')!;
    expect(read).toEqual(entry('a'));
    read.output.push('changed');
    expect(store.get('a')!.output).toHaveLength(1);
    expect(store.delete('a')).toBe(true);
    expect(store.delete('a')).toBe(false);
    expect(store.get('a')).toBeUndefined();
  });

  it('forgets expired responses and the oldest beyond maxResponses', () => {
    store = ResponseStore.open(':memory:', options);
    store.put(entry('old', null, { createdAt: Math.floor(Date.now() / 1000) - 7200 }));
    expect(store.get('old')).toBeUndefined();
    for (const id of ['a', 'b', 'c', 'd']) store.put(entry(id));
    expect(store.get('a')).toBeUndefined();
    expect(['b', 'c', 'd'].map((id) => store.get(id)?.id)).toEqual(['b', 'c', 'd']);
  });

  it('refuses a response over maxBytesPerResponse with a 400 naming store', () => {
    store = ResponseStore.open(':memory:', options);
    const big = entry('big', null, { output: ['x'.repeat(5000)] });
    expect(() => store.put(big)).toThrow(InvalidRequestError);
    try {
      store.put(big);
    } catch (error) {
      expect((error as InvalidRequestError).param).toBe('store');
    }
    expect(store.get('big')).toBeUndefined();
  });

  it('pages input items as OpenAI lists them', () => {
    store = ResponseStore.open(':memory:', options);
    store.put(entry('a'));
    expect(store.inputItems('a', { limit: 2, order: 'asc' })).toEqual({ data: [{ id: 'a_in1', type: 'message' }, { id: 'a_in2', type: 'message' }], firstId: 'a_in1', lastId: 'a_in2', hasMore: true });
    expect(store.inputItems('a', { limit: 2, order: 'asc', after: 'a_in2' })).toEqual({ data: [{ id: 'a_in3', type: 'message' }], firstId: 'a_in3', lastId: 'a_in3', hasMore: false });
    expect(store.inputItems('a', { limit: 20, order: 'desc' })!.data.map((i) => (i as { id: string }).id)).toEqual(['a_in3', 'a_in2', 'a_in1']);
    expect(store.inputItems('a', { limit: 20, order: 'asc', after: 'nope' })).toEqual({ data: [], firstId: null, lastId: null, hasMore: false });
    expect(store.inputItems('nope', { limit: 20, order: 'asc' })).toBeUndefined();
  });

  it('gives the conversation ending at a response, oldest turn first', () => {
    store = ResponseStore.open(':memory:', options);
    store.put(entry('a'));
    store.put(entry('b', 'a'));
    const ids = store.conversation('b')!.map((i) => (i as { id: string }).id);
    expect(ids).toEqual(['a_in1', 'a_in2', 'a_in3', 'a_out', 'b_in1', 'b_in2', 'b_in3', 'b_out']);
    expect(store.conversation('nope')).toBeUndefined();
  });
});
