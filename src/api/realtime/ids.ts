import { randomBytes } from 'node:crypto';

/**
 * Ids in OpenAI's Realtime style: a prefix naming the kind, then 21 random
 * letters and digits ('event_BJhGUGqLBkXMdVESp2SxR'). Clients log and compare
 * them; some check the prefix. They also fit the item-id rule the session
 * enforces on ids a client picks (letters, digits, _ and -, at most 64).
 */
export type IdKind = 'event' | 'item' | 'resp' | 'sess' | 'call' | 'conv';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const LENGTH = 21;

export function newId(kind: IdKind): string {
  let id = '';
  while (id.length < LENGTH) {
    for (const byte of randomBytes(LENGTH)) {
      // 248 = 4 × 62: bytes above it are dropped so that every character is equally likely.
      if (byte < 248 && id.length < LENGTH) id += ALPHABET[byte % 62];
    }
  }
  return `${kind}_${id}`;
}

/** The id of one server event. */
export const newEventId = (): string => newId('event');
