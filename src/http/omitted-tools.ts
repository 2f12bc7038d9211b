import type { Request, Response } from 'express';
import { checkOmittedTools, OMITTED_TOOLS_HEADER, omittedToolsHeader, type OmittedTool } from '../api/hosted-tools.js';

/** Most clients remembered as already told: past this the oldest is forgotten (and told again). */
const MAX_CLIENTS = 1000;

/**
 * The hosted-tools rule at the HTTP edge (api/hosted-tools.ts): a 400 with
 * `--strict-tools`; otherwise the `lserve-omitted-tools` header on the
 * response, and one log line per client (its address and user agent) and
 * set of tools, so that an agent sending them on every request is named once.
 */
export class OmittedToolsReporter {
  private readonly told = new Set<string>();

  constructor(
    private readonly strict: boolean,
    private readonly log: (message: string) => void,
  ) {}

  /** Call before any work: throws with --strict-tools, sets the header otherwise. */
  report(req: Request, res: Response, omitted: readonly OmittedTool[]): void {
    checkOmittedTools(omitted, this.strict);
    if (omitted.length === 0) return;
    const names = omittedToolsHeader(omitted);
    res.setHeader(OMITTED_TOOLS_HEADER, names);
    const client = `${req.socket.remoteAddress ?? '?'} ${req.get('user-agent') ?? '(no user agent)'}`;
    const key = `${client}\n${names}`;
    if (this.told.has(key)) return;
    if (this.told.size >= MAX_CLIENTS) this.told.delete(this.told.values().next().value!);
    this.told.add(key);
    this.log(`${req.path}: tools this server does not run were left out for ${client}: ${names} (lserve serve --strict-tools refuses them instead)`);
  }
}
