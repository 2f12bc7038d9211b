/**
 * Requests shaped like a coding agent's first request, written from the
 * providers' API references (not copied from any client): a long system
 * prompt of working rules, a dozen tools with full JSON schemas, some of
 * them deferred or grouped, a hosted tool the server does not run, and the
 * metadata, caching and thinking fields agents send. The suites and
 * bench/agents.ts use them, so both measure what agents really send.
 */

const TOPICS = [
  'Reading the code before changing it',
  'Keeping changes small and reviewable',
  'Running the tests that cover a change',
  'Explaining what was done and why',
  'Asking before destructive operations',
  'Working with version control',
  'Handling secrets and credentials',
  'Following the project conventions',
  'Writing commit messages',
  'Debugging a failing build',
  'Searching a large repository',
  'Planning multi-step work',
];

/** A system prompt of about `kilobytes` KB of numbered working rules. */
export function agentSystemPrompt(kilobytes = 48): string {
  const sections: string[] = ['You are an interactive coding assistant working in a terminal on the user\'s repository. Use the tools below to read, search, edit and run code.'];
  for (let i = 0; sections.join('\n\n').length < kilobytes * 1024; i++) {
    const topic = TOPICS[i % TOPICS.length]!;
    sections.push(
      `## ${i + 1}. ${topic}\n` +
        `- Before acting on "${topic.toLowerCase()}", look at how the repository already does it; prefer its patterns to new ones (rule ${i + 1}.1).\n` +
        `- State in one sentence what you are about to do, then do it; do not narrate every step (rule ${i + 1}.2).\n` +
        `- When a command fails, read its output, form one hypothesis and test it before trying something else (rule ${i + 1}.3).\n` +
        `- Never invent file paths, APIs or command-line flags: check them with the search tools first (rule ${i + 1}.4).\n` +
        `- Keep answers short: the user reads them in a terminal, ${80 + (i % 7) * 10} columns wide (rule ${i + 1}.5).`,
    );
  }
  return sections.join('\n\n');
}

const schema = (properties: Record<string, unknown>, required: string[]) => ({ type: 'object', properties, required, additionalProperties: false });
const text = (description: string) => ({ type: 'string', description });

/** The tools, as name, description and JSON schema: the same in every API shape. */
export const AGENT_TOOLS: Array<{ name: string; description: string; schema: Record<string, unknown>; deferred?: boolean }> = [
  {
    name: 'Bash',
    description: 'Runs a shell command in a persistent session with a timeout. Use it for builds, tests and git; prefer the dedicated tools for reading and searching files. Quote paths that contain spaces. '.repeat(3),
    schema: schema({ command: text('The command to run'), timeout: { type: 'number', description: 'Milliseconds, at most 600000' }, description: text('What the command does, in five words') }, ['command']),
  },
  {
    name: 'Read',
    description: 'Reads a file from the local filesystem, with line numbers. Reads up to 2000 lines from the start unless an offset and limit are given. '.repeat(3),
    schema: schema({ file_path: text('Absolute path'), offset: { type: 'number' }, limit: { type: 'number' } }, ['file_path']),
  },
  {
    name: 'Edit',
    description: 'Replaces an exact string in a file. The old string must occur exactly once unless replace_all is set; read the file first. '.repeat(3),
    schema: schema({ file_path: text('Absolute path'), old_string: text('Text to replace'), new_string: text('Replacement'), replace_all: { type: 'boolean', default: false } }, ['file_path', 'old_string', 'new_string']),
  },
  {
    name: 'Write',
    description: 'Writes a whole file, replacing it if it exists. Prefer Edit for changes to existing files. '.repeat(3),
    schema: schema({ file_path: text('Absolute path'), content: text('The whole content') }, ['file_path', 'content']),
  },
  {
    name: 'Glob',
    description: 'Finds files by glob pattern, sorted by modification time. '.repeat(3),
    schema: schema({ pattern: text('Glob such as src/**/*.ts'), path: text('Directory to search') }, ['pattern']),
  },
  {
    name: 'Grep',
    description: 'Searches file contents with a regular expression; returns matching files, lines or counts. '.repeat(3),
    schema: schema(
      { pattern: text('Regular expression'), path: text('File or directory'), glob: text('Filter files'), output_mode: { type: 'string', enum: ['content', 'files_with_matches', 'count'] }, '-i': { type: 'boolean' } },
      ['pattern'],
    ),
  },
  {
    name: 'TodoWrite',
    description: 'Keeps a structured list of the steps of the current task, each pending, in progress or done. '.repeat(3),
    schema: schema(
      { todos: { type: 'array', items: schema({ content: text('The step'), status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] } }, ['content', 'status']) } },
      ['todos'],
    ),
  },
  {
    name: 'Task',
    description: 'Starts a sub-agent for a self-contained search or research task and returns its final report. '.repeat(3),
    schema: schema({ description: text('Three to five words'), prompt: text('The task') }, ['description', 'prompt']),
  },
  {
    name: 'WebFetch',
    description: 'Fetches a URL and answers a question about its content. '.repeat(3),
    schema: schema({ url: { type: 'string', format: 'uri' }, prompt: text('What to find') }, ['url', 'prompt']),
  },
  {
    name: 'NotebookEdit',
    description: 'Replaces, inserts or deletes a cell of a Jupyter notebook. '.repeat(3),
    schema: schema({ notebook_path: text('Absolute path'), cell_id: text('Cell'), new_source: text('Source'), edit_mode: { type: 'string', enum: ['replace', 'insert', 'delete'] } }, ['notebook_path', 'new_source']),
  },
  {
    name: 'mcp__docs__search',
    description: 'Searches the project documentation server for pages about a topic.',
    schema: schema({ query: text('Words to search for'), limit: { type: 'integer', minimum: 1, maximum: 20 } }, ['query']),
    deferred: true,
  },
  {
    name: 'mcp__docs__page',
    description: 'Returns one documentation page by its id.',
    schema: schema({ id: text('Page id') }, ['id']),
    deferred: true,
  },
];

/**
 * An Anthropic Messages request as a terminal agent's first turn sends it:
 * ≈ 48 KB of system prompt in cached blocks, the twelve tools (the MCP ones
 * deferred) plus a hosted web search, adaptive thinking with an effort,
 * context management, metadata and max_tokens 32000.
 */
export function anthropicAgentRequest(model: string, prompt = 'Find where the server reads its port and add a --port flag.') {
  const system = agentSystemPrompt();
  const half = Math.floor(system.length / 2);
  return {
    model,
    max_tokens: 32_000,
    system: [
      { type: 'text' as const, text: system.slice(0, half), cache_control: { type: 'ephemeral' as const } },
      { type: 'text' as const, text: system.slice(half), cache_control: { type: 'ephemeral' as const } },
    ],
    messages: [
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: '<system-reminder>The working directory is /home/dev/project, a git repository on branch main.</system-reminder>' },
          { type: 'text' as const, text: prompt, cache_control: { type: 'ephemeral' as const } },
        ],
      },
    ],
    tools: [
      ...AGENT_TOOLS.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.schema as { type: 'object' }, ...(tool.deferred ? { defer_loading: true } : {}) })),
      { type: 'web_search_20250305' as const, name: 'web_search' as const, max_uses: 5 },
    ],
    thinking: { type: 'adaptive' as const, display: 'omitted' as const },
    output_config: { effort: 'high' as const },
    context_management: { edits: [{ type: 'clear_thinking_20251015' as const, keep: 'all' as const }] },
    metadata: { user_id: 'user_0123456789abcdef_account_session' },
    stream: true,
  };
}

/** The beta header an agent sends with it. */
export const ANTHROPIC_AGENT_BETAS = ['interleaved-thinking-2025-05-14', 'context-management-2025-06-27', 'fine-grained-tool-streaming-2025-05-14', 'oauth-2025-04-20'];

/**
 * A Responses request as a terminal agent's first turn sends it: long
 * instructions, a developer message, function tools, a namespace of MCP
 * tools, the hosted web search, encrypted reasoning asked for, store false,
 * client metadata and a prompt cache key.
 */
export function responsesAgentRequest(model: string, prompt = 'Add a --port flag to the server.') {
  const [shell, read, edit, , glob, grep, todo, , , , search, page] = AGENT_TOOLS;
  const fn = (tool: (typeof AGENT_TOOLS)[number]) => ({ type: 'function' as const, name: tool.name.toLowerCase(), description: tool.description, parameters: tool.schema, strict: false });
  return {
    model,
    instructions: agentSystemPrompt(18),
    input: [
      { type: 'message' as const, role: 'developer' as const, content: [{ type: 'input_text' as const, text: `<permissions>Commands run in a sandbox with the workspace writable.</permissions>\n${agentSystemPrompt(4)}` }] },
      { type: 'message' as const, role: 'user' as const, content: [{ type: 'input_text' as const, text: '<environment_context><cwd>/home/dev/project</cwd><shell>bash</shell></environment_context>' }] },
      { type: 'message' as const, role: 'user' as const, content: [{ type: 'input_text' as const, text: prompt }] },
    ],
    tools: [
      fn(shell!),
      fn(read!),
      fn(edit!),
      fn(glob!),
      fn(grep!),
      fn(todo!),
      { type: 'namespace' as const, name: 'mcp__docs__', description: 'Tools of the docs MCP server.', tools: [search!, page!].map((tool) => ({ type: 'function' as const, name: tool.name.replace('mcp__docs__', ''), description: tool.description, parameters: tool.schema })) },
      { type: 'web_search' as const, external_web_access: false },
    ],
    tool_choice: 'auto' as const,
    parallel_tool_calls: false,
    reasoning: { effort: 'medium' as const, summary: 'auto' as const },
    store: false,
    stream: true,
    include: ['reasoning.encrypted_content'],
    prompt_cache_key: '5d0c6c1e-8e3f-4a27-9a51-0b7c3c4f9f10',
    text: { verbosity: 'medium' as const },
    client_metadata: { 'x-codex-installation-id': '2f1e0d3c-aaaa-4bbb-8ccc-1234567890ab', session_id: 'sess_1', thread_id: 'thread_1' },
  };
}
