import { Command, Option } from 'commander';
import type { RunningModelList } from '../../api/ps.js';
import { CliError, EXIT_USAGE } from '../errors.js';
import { psTable } from '../views/ps-table.js';

interface PsFlags {
  host: string;
  port: string;
  apiKey?: string;
  json?: boolean;
}

/** How long to wait for the server's answer: it answers from memory, so a long wait means something is wrong. */
const TIMEOUT_MS = 10_000;

export function psCommand(): Command {
  return new Command('ps')
    .description("Show the running server's loaded models: memory, requests on them, and when each unloads.")
    .addOption(new Option('--host <host>', 'address of the server').env('LSERVE_HOST').default('127.0.0.1'))
    .addOption(new Option('-p, --port <port>', 'port of the server').env('LSERVE_PORT').default('8080'))
    .addOption(new Option('--api-key <key>', "the server's API key, when it requires one").env('LSERVE_API_KEY'))
    .option('--json', 'machine-readable output (an array of objects, as GET /v1/ps gives them)')
    .addHelpText('after', '\nExamples:\n  $ lserve ps\n  $ lserve ps --port 9000 --json')
    .action(async (flags: PsFlags) => {
      const base = serverUrl(flags.host, flags.port);
      const body = await getJson<RunningModelList>(`${base}/v1/ps`, base, flags.apiKey);
      if (flags.json) process.stdout.write(`${JSON.stringify(body.models, null, 2)}\n`);
      else process.stdout.write(psTable(body.models));
    });
}

/** The server's URL from the address `serve` was given: a wildcard bind is reached over loopback. */
export function serverUrl(host: string, port: string): string {
  const n = Number(port);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new CliError(`--port must be 1-65535, got '${port}'`, EXIT_USAGE);
  const name = host === '0.0.0.0' || host === '' ? '127.0.0.1' : host === '::' || host === '[::]' ? '::1' : host;
  return `http://${name.includes(':') && !name.startsWith('[') ? `[${name}]` : name}:${n}`;
}

async function getJson<T>(url: string, base: string, apiKey: string | undefined): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (error) {
    throw new CliError(`no lserve server is running at ${base} (${reason(error)}); start one with \`lserve serve\`, or point --host/--port at it`);
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    const message = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
    const detail = typeof message === 'string' ? message : `HTTP ${res.status}`;
    if (res.status === 401) throw new CliError(`${base}: ${detail} (pass --api-key or set LSERVE_API_KEY)`);
    if (res.status === 404) throw new CliError(`${base} does not answer GET /v1/ps: is it an lserve server of this version? (${detail})`);
    throw new CliError(`${base}: ${detail}`);
  }
  if (!body || !Array.isArray((body as { models?: unknown }).models)) throw new CliError(`${base} answered GET /v1/ps with something that is not a model list: is it an lserve server?`);
  return body as T;
}

/** Why a connection failed, in a few words (fetch hides it in `cause`). */
function reason(error: unknown): string {
  if ((error as Error)?.name === 'TimeoutError') return `no answer in ${TIMEOUT_MS / 1000} s`;
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code === 'ECONNREFUSED') return 'connection refused';
  if (cause?.code === 'ENOTFOUND') return 'unknown host';
  return cause?.code ?? cause?.message ?? (error as Error)?.message ?? String(error);
}
