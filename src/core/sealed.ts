import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Text the server hands a client to give back later unchanged: a model's
 * reasoning, as Anthropic's thinking `signature` and the Responses API's
 * `encrypted_content` carry it. Sealed with AES-256-GCM under a key only the
 * server holds, so the client can neither read nor alter it, and bound to
 * what it is for (`purpose`, authenticated data), so a seal made for one
 * field opens in no other.
 *
 * Opening a seal that another key made, or one altered on the way, yields
 * undefined, never an error: the request then goes on without that
 * reasoning, as Anthropic's API drops another model's thinking.
 */

const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;

export class Sealer {
  private constructor(private readonly key: Buffer) {}

  /** A sealer over `secret` (any text; hashed to the key). */
  static fromSecret(secret: string): Sealer {
    return new Sealer(createHash('sha256').update(secret).digest());
  }

  /**
   * The server's sealer: LSERVE_SECRET when set (the same on every replica
   * behind one address, so each opens what another sealed), else a random
   * key kept in `<home>/secret` (created once, readable by its owner only).
   */
  static forServer(home: string, secret = process.env.LSERVE_SECRET): Sealer {
    if (secret) return Sealer.fromSecret(secret);
    const file = path.join(home, 'secret');
    const kept = readKey(file);
    if (kept) return new Sealer(kept);
    mkdirSync(home, { recursive: true });
    try {
      writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
    } catch {
      // Another process wrote it first (theirs is the key), or what is there is no key (replaced below).
    }
    const key = readKey(file);
    if (key) return new Sealer(key);
    const fresh = randomBytes(32);
    writeFileSync(file, fresh.toString('hex'), { mode: 0o600 });
    return new Sealer(fresh);
  }

  seal(purpose: string, text: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(purpose));
    const body = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()]);
    return Buffer.concat([Buffer.of(VERSION), iv, cipher.getAuthTag(), body]).toString('base64url');
  }

  open(purpose: string, sealed: string): string | undefined {
    const bytes = Buffer.from(sealed, 'base64url');
    if (bytes.length < 1 + IV_BYTES + TAG_BYTES || bytes[0] !== VERSION) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, bytes.subarray(1, 1 + IV_BYTES));
      decipher.setAAD(Buffer.from(purpose));
      decipher.setAuthTag(bytes.subarray(1 + IV_BYTES, 1 + IV_BYTES + TAG_BYTES));
      return Buffer.concat([decipher.update(bytes.subarray(1 + IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }
}

/** The key kept in `file`; undefined when there is none or what is there is no key. */
function readKey(file: string): Buffer | undefined {
  try {
    const hex = readFileSync(file, 'utf8').trim();
    return /^[0-9a-f]{64}$/.test(hex) ? Buffer.from(hex, 'hex') : undefined;
  } catch {
    return undefined;
  }
}
