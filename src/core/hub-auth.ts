import { open } from 'node:fs/promises';
import { StoreError } from './errors.js';

/**
 * A Hugging Face access token, for gated and private models: from
 * `--hf-token-file` or HF_TOKEN. It goes as `Authorization: Bearer` to the
 * hub endpoint's origin (huggingface.co, or HF_ENDPOINT) and nowhere else:
 * not to the CDN a download is redirected to (download-file.ts drops it on
 * every hop to another origin, as browsers and curl do), and never into a log
 * or an error message, which say where the token came from instead.
 */
export interface HubToken {
  token: string;
  /** Where it came from, for messages: 'HF_TOKEN' or '--hf-token-file <path>'. */
  from: string;
}

/** What a token can hold: visible ASCII (a header cannot carry more, and undici would quote a bad value in its error). */
const TOKEN = /^[\x21-\x7e]+$/;
/** Tokens are tens of bytes: a larger file is the wrong file, not read whole. */
const MAX_TOKEN_FILE = 4096;

/** HF_TOKEN, read at call time like HF_ENDPOINT; undefined when unset or blank. */
export function envHubToken(): HubToken | undefined {
  const token = process.env.HF_TOKEN?.trim();
  return token ? checked(token, 'HF_TOKEN') : undefined;
}

/** The token in a file (`--hf-token-file`), trimmed as `huggingface-cli` writes it (with a newline). */
export async function readHubTokenFile(file: string): Promise<HubToken> {
  const from = `--hf-token-file ${file}`;
  let text: string;
  try {
    const handle = await open(file, 'r');
    try {
      const buffer = Buffer.alloc(MAX_TOKEN_FILE + 1);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      if (bytesRead > MAX_TOKEN_FILE) throw new StoreError(`${from}: the file is larger than ${MAX_TOKEN_FILE} bytes, so it is not a token file`, 'invalid_hf_token');
      text = buffer.subarray(0, bytesRead).toString('utf8');
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (error instanceof StoreError) throw error;
    const code = (error as NodeJS.ErrnoException).code ?? 'unknown error';
    throw new StoreError(`${from}: cannot read the file (${code})`, 'invalid_hf_token');
  }
  const token = text.trim();
  if (!token) throw new StoreError(`${from}: the file is empty`, 'invalid_hf_token');
  return checked(token, from);
}

function checked(token: string, from: string): HubToken {
  if (!TOKEN.test(token)) {
    throw new StoreError(`${from} does not hold a Hugging Face token: it has spaces, line breaks or other characters a token never has (its content is not shown)`, 'invalid_hf_token');
  }
  return { token, from };
}

/** `scheme://host:port` of a URL; undefined for one that does not parse. */
export function originOf(url: string): string | undefined {
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

/**
 * What to do about a 401/403 from the hub for model `id`: which model needs
 * a token, how to give one, and the model page where a gated model's licence
 * is accepted. `endpoint` is the hub's base URL, `url` the refused one.
 */
export function hubDeniedHint(id: string, endpoint: string, url: string, status: number, token: HubToken | undefined): string {
  const repo = url.startsWith(`${endpoint}/`) ? /^(.+?)\/resolve\//.exec(url.slice(endpoint.length + 1))?.[1] : undefined;
  const page = repo ? `${endpoint}/${repo}` : 'its model page';
  if (!token) {
    return (
      `'${id}' is gated or private, and no Hugging Face token was given. If it is gated, accept its licence on ${page} while signed in; ` +
      'then give lserve an access token of that account (https://huggingface.co/settings/tokens): set HF_TOKEN, or pass --hf-token-file <path>.'
    );
  }
  if (status === 401) {
    return `the hub did not accept the Hugging Face token from ${token.from} for '${id}': check that it is a valid access token that has not been revoked. If '${id}' is gated, its licence must also be accepted on ${page} by the token's account.`;
  }
  return (
    `the account of the Hugging Face token from ${token.from} has no access to '${id}': if it is gated, accept its licence on ${page} with that account ` +
    '(some authors approve requests by hand); a fine-grained token also needs read access to gated repositories.'
  );
}
