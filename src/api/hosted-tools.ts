import { UnsupportedError } from '../core/errors.js';

/**
 * One rule for the tools a provider's own servers run (OpenAI's web search,
 * file search, code interpreter, hosted MCP; Anthropic's web search, web
 * fetch, code execution, tool search, MCP servers): lserve runs none of
 * them, and agents send them on every request whether or not they matter.
 * By default such a tool is left out of what the model is offered, and the
 * response says so: the `lserve-omitted-tools` header names each one
 * (routes set it; the server logs it once per client). `serve
 * --strict-tools` makes any of them a 400 naming the tool instead.
 */

export const OMITTED_TOOLS_HEADER = 'lserve-omitted-tools';

export interface OmittedTool {
  /** Where it was in the request: 'tools.3', 'mcp_servers.0'. */
  param: string;
  /** Its type as the client sent it ('web_search_20250305', 'mcp'). */
  type: string;
}

/** With --strict-tools, the first omitted tool as a 400; otherwise the tools, for the header. */
export function checkOmittedTools(omitted: readonly OmittedTool[], strict: boolean): readonly OmittedTool[] {
  const first = omitted[0];
  if (strict && first) {
    throw new UnsupportedError(`The tool '${first.type}' runs on the provider's servers, and this server does not run it (lserve serve --strict-tools): remove it or declare a function tool.`, {
      param: first.param,
    });
  }
  return omitted;
}

/** The header's value: each omitted tool's type, once, in request order. */
export function omittedToolsHeader(omitted: readonly OmittedTool[]): string {
  return [...new Set(omitted.map((tool) => tool.type))].join(', ');
}
