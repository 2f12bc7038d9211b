import { z } from 'zod';
import { InvalidRequestError } from '../../core/errors.js';
import type { ChatTool } from '../../core/tasks/chat.js';
import type { OmittedTool } from '../hosted-tools.js';

/**
 * The Responses API's tools, as OpenAI's reference has them, and what the
 * model is offered for each:
 * - `function` and `custom` (free text, a function of one string to the
 *   engine) as declared;
 * - `namespace` groups: each member offered as `<namespace>__<name>` (a
 *   namespace already ending in `__`, as agents name MCP servers, is not
 *   doubled), and its calls returned with `name` and `namespace` apart, as
 *   the reference shapes them;
 * - `tool_search` run by the client: offered as a function; its call is a
 *   `tool_search_call` item, and the tools a `tool_search_output` (or an
 *   `additional_tools` item) carries come into the conversation there.
 *   While a client tool search is offered, `defer_loading` tools wait for it;
 *   without one they are offered like any other;
 * - `mcp` servers (remote MCP): their tools, once listed, offered as
 *   `<server_label>__<name>` and called by the server (http/mcp-tools.ts);
 * - hosted tools (web search, file search, code interpreter, computer use,
 *   image generation, shells, apply_patch, a server-side tool search): left
 *   out, under the hosted-tools rule (hosted-tools.ts).
 */

/** A function tool's name, as OpenAI allows it. */
export const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -');

const loose = z.unknown().optional();
const MCP_FILTER_MAX = 256;

const functionTool = z.object({
  type: z.literal('function'),
  name: toolName,
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
  defer_loading: z.boolean().optional(),
  // What the tool returns, and calls from generated programs: nothing the model's calls change by.
  output_schema: loose,
  allowed_callers: loose,
});

const customTool = z.object({
  type: z.literal('custom'),
  name: toolName,
  description: z.string().nullish(),
  format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      // A lark or regex grammar over free text cannot be enforced by the engine's tool calling
      // (its calls are JSON whose schema grammar has no regex), so it is refused rather than ignored.
      z
        .object({ type: z.literal('grammar'), syntax: z.enum(['lark', 'regex']), definition: z.string() })
        .refine(() => false, { message: 'grammar-constrained custom tools are not supported: the engine cannot enforce a lark or regex grammar on tool input', params: { code: 'unsupported_parameter' } }),
    ])
    .optional(),
  defer_loading: z.boolean().optional(),
  allowed_callers: loose,
});

const namespaceTool = z.object({
  type: z.literal('namespace'),
  name: z.string().min(1).max(64),
  description: z.string(),
  tools: z
    .array(z.discriminatedUnion('type', [functionTool, customTool], { error: "a namespace holds 'function' and 'custom' tools" }))
    .min(1, 'must contain at least one tool'),
});

const toolSearchTool = z.object({
  type: z.literal('tool_search'),
  execution: z.enum(['server', 'client']).nullish(),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
});

const mcpFilter = z.object({ tool_names: z.array(z.string()).max(MCP_FILTER_MAX).optional(), read_only: z.boolean().optional() });

/** A remote MCP server whose tools the server lists and calls (OpenAI's `Tool.Mcp`). */
export const mcpTool = z.object({
  type: z.literal('mcp'),
  server_label: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -'),
  server_url: z.url({ protocol: /^https?$/, error: 'must be an http or https URL' }).nullish(),
  server_description: z.string().nullish(),
  allowed_tools: z.union([z.array(z.string()).max(MCP_FILTER_MAX), mcpFilter]).nullish(),
  require_approval: z.union([z.enum(['always', 'never']), z.object({ always: mcpFilter.nullish(), never: mcpFilter.nullish() })]).nullish(),
  headers: z.record(z.string(), z.string()).nullish(),
  authorization: z.string().nullish(),
  connector_id: z.unknown().refine((v) => v == null, { message: "OpenAI's connectors are not reachable from here: declare the server with lserve serve --mcp-config", params: { code: 'unsupported_parameter' } }).optional(),
  // Deferred listing and programmatic callers: every allowed tool is offered as it is listed.
  defer_loading: loose,
  allowed_callers: loose,
  tunnel_id: loose,
});
export type McpToolDeclaration = z.output<typeof mcpTool>;

/** Tools OpenAI's servers run (or that need an environment described to the model): left out. */
const HOSTED = [
  'web_search',
  'web_search_preview',
  'web_search_2025_08_26',
  'web_search_preview_2025_03_11',
  'file_search',
  'computer',
  'computer_use',
  'computer_use_preview',
  'code_interpreter',
  'image_generation',
  'local_shell',
  'shell',
  'apply_patch',
  'programmatic_tool_calling',
] as const;
const hostedTool = z.looseObject({ type: z.enum(HOSTED) });

export const declaredTool = z.discriminatedUnion('type', [functionTool, customTool, namespaceTool, toolSearchTool, mcpTool, hostedTool], {
  error: `tool type must be 'function', 'custom', 'namespace', 'tool_search', 'mcp' or a hosted tool (${HOSTED.join(', ')})`,
});
export type DeclaredTool = z.output<typeof declaredTool>;
type Member = z.output<typeof functionTool> | z.output<typeof customTool>;

/** What a name the model calls stands for: a tool of the request, in its namespace, or the client's tool search. */
export interface ToolIdentity {
  kind: 'function' | 'custom' | 'tool_search' | 'mcp';
  name: string;
  /** The namespace, or for an MCP tool its server_label. */
  namespace?: string;
  /** An MCP tool whose calls wait for the client's approval (require_approval). */
  approval?: boolean;
}

/** A tool an MCP server listed (the mcp_list_tools item's shape). */
export interface McpListedTool {
  name: string;
  input_schema: unknown;
  description?: string | null;
  annotations?: unknown;
}

const readOnly = (tool: McpListedTool) => (tool.annotations as { readOnlyHint?: unknown } | null | undefined)?.readOnlyHint === true;
const matches = (filter: z.output<typeof mcpFilter> | null | undefined, tool: McpListedTool) =>
  !!filter && ((filter.tool_names?.includes(tool.name) ?? false) || (filter.read_only === true && readOnly(tool)));

/** Whether the request lets the model call this listed tool (allowed_tools). */
export function mcpToolAllowed(declaration: McpToolDeclaration, tool: McpListedTool): boolean {
  const allowed = declaration.allowed_tools;
  if (allowed == null) return true;
  if (Array.isArray(allowed)) return allowed.includes(tool.name);
  if (allowed.tool_names === undefined && allowed.read_only === undefined) return true;
  return (allowed.tool_names === undefined || allowed.tool_names.includes(tool.name)) && (allowed.read_only !== true || readOnly(tool));
}

/** Whether a call of this tool waits for the client's approval: 'always' unless said otherwise, as OpenAI defaults. */
export function mcpApprovalNeeded(declaration: McpToolDeclaration, tool: McpListedTool): boolean {
  const rule = declaration.require_approval;
  if (rule == null || rule === 'always') return true;
  if (rule === 'never') return false;
  if (matches(rule.never, tool)) return false;
  if (matches(rule.always, tool)) return true;
  return true;
}

/** The namespace top-level tools are in, as clients may name it. */
const DEFAULT_NAMESPACES = new Set(['', 'functions']);

export function visibleName(name: string, namespace?: string | null): string {
  if (!namespace || DEFAULT_NAMESPACES.has(namespace)) return name;
  return `${namespace}${namespace.endsWith('__') ? '' : '__'}${name}`;
}

/** The free-text input a custom tool takes, as an engine function of one string. */
export const CUSTOM_INPUT_PARAMETERS = { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] };

const TOOL_SEARCH_PARAMETERS = { type: 'object', properties: { query: { type: 'string', description: 'What the tool to find should do' } }, required: ['query'] };

/**
 * The tools a request makes callable, by the name the model calls them,
 * filled from `tools` and then from what the conversation brings in
 * (tool_search_output, additional_tools).
 */
export class ToolRegistry {
  readonly byName = new Map<string, { tool: ChatTool; identity: ToolIdentity }>();
  readonly omitted: OmittedTool[] = [];
  /** Whether the client runs a tool search (deferred tools then wait for it). */
  readonly searches: boolean;
  /** Deferred tools the conversation has brought in so far. */
  private readonly brought = new Set<string>();

  constructor(tools: readonly DeclaredTool[]) {
    this.searches = tools.some((t) => t.type === 'tool_search' && t.execution === 'client');
    tools.forEach((tool, i) => {
      if (tool.type === 'tool_search') {
        if (tool.execution !== 'client') this.omitted.push({ param: `tools.${i}`, type: 'tool_search' });
        else
          this.add(
            {
              name: 'tool_search',
              description: tool.description ?? 'Searches the tools that are not listed yet; the ones found can be called next.',
              parameters: (tool.parameters as Record<string, unknown> | null | undefined) ?? TOOL_SEARCH_PARAMETERS,
            },
            { kind: 'tool_search', name: 'tool_search' },
            `tools.${i}`,
          );
      } else if (tool.type === 'function' || tool.type === 'custom') {
        this.addMember(tool, undefined, `tools.${i}`, this.searches && tool.defer_loading === true);
      } else if (tool.type === 'mcp') {
        // Offered once its server's tools are listed (addMcp).
      } else if (tool.type === 'namespace') {
        tool.tools.forEach((member, j) => this.addMember(member, tool, `tools.${i}.tools.${j}`, this.searches && member.defer_loading === true));
      } else {
        this.omitted.push({ param: `tools.${i}`, type: tool.type });
      }
    });
  }

  /**
   * Tools a tool_search_output or additional_tools item brings in at that
   * point of the conversation: callable from then on, their definitions in
   * the item's text (tool-definitions.ts). Returns the ones that are new.
   */
  bringIn(tools: readonly DeclaredTool[], param: string): ChatTool[] {
    const brought: ChatTool[] = [];
    tools.forEach((tool, i) => {
      const members = tool.type === 'namespace' ? tool.tools.map((m) => ({ member: m, namespace: tool })) : tool.type === 'function' || tool.type === 'custom' ? [{ member: tool, namespace: undefined }] : [];
      for (const { member, namespace } of members) {
        const name = visibleName(member.name, namespace?.name);
        const tool = this.byName.get(name)?.tool ?? this.addMember(member, namespace, `${param}.${i}`, true);
        if (!tool.deferred || this.brought.has(name)) continue;
        this.brought.add(name);
        brought.push(tool);
      }
    });
    return brought;
  }

  /** An MCP server's listed tools, those the request allows, offered as `<server_label>__<name>`. */
  addMcp(declaration: McpToolDeclaration, tools: readonly McpListedTool[], param: string): void {
    for (const listed of tools) {
      if (!mcpToolAllowed(declaration, listed)) continue;
      const about = [declaration.server_description, listed.description].filter(Boolean).join('\n');
      const schema = listed.input_schema !== null && typeof listed.input_schema === 'object' ? (listed.input_schema as Record<string, unknown>) : undefined;
      const tool: ChatTool = { name: visibleName(listed.name, declaration.server_label), ...(about ? { description: about } : {}), parameters: schema };
      this.add(tool, { kind: 'mcp', name: listed.name, namespace: declaration.server_label, approval: mcpApprovalNeeded(declaration, listed) }, param);
    }
  }

  /** The tools the model may call: every one but the deferred tools not brought in yet (the prompt lists only those not deferred). */
  chatTools(): ChatTool[] {
    return [...this.byName.values()].map((entry) => entry.tool).filter((tool) => !tool.deferred || this.brought.has(tool.name));
  }

  private addMember(member: Member, namespace: z.output<typeof namespaceTool> | undefined, param: string, deferred: boolean): ChatTool {
    const about = [namespace?.description, member.description].filter(Boolean).join('\n');
    const tool: ChatTool = {
      name: visibleName(member.name, namespace?.name),
      ...(about ? { description: about } : {}),
      parameters: member.type === 'custom' ? CUSTOM_INPUT_PARAMETERS : ((member.parameters as Record<string, unknown> | null | undefined) ?? undefined),
      ...(deferred ? { deferred: true } : {}),
    };
    this.add(tool, { kind: member.type, name: member.name, ...(namespace ? { namespace: namespace.name } : {}) }, param);
    return tool;
  }

  private add(tool: ChatTool, identity: ToolIdentity, param: string): void {
    if (this.byName.has(tool.name)) throw new InvalidRequestError(`Two tools would both be called '${tool.name}'.`, { param });
    this.byName.set(tool.name, { tool, identity });
  }
}
