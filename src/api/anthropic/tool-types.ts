/**
 * The tools Anthropic's API defines by `type` rather than by a schema the
 * client writes: client tools (bash, the text editor, memory), which the
 * client runs, so lserve offers them to the model with the input each
 * documents; and server tools, which Anthropic's servers run (web search,
 * web fetch, code execution, tool search, MCP servers), which lserve does
 * not: those fall under the hosted-tools rule (api/hosted-tools.ts).
 */

export interface ClientToolSchema {
  /** The name the type fixes (the model calls the tool by it). */
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}

const bash: ClientToolSchema = {
  name: 'bash',
  description: 'Run a command in a persistent bash shell; `restart: true` restarts the shell.',
  parameters: {
    type: 'object',
    properties: { command: { type: 'string', description: 'The command to run.' }, restart: { type: 'boolean' } },
  },
};

const editorCommands = (commands: string[]): Record<string, unknown> => ({
  type: 'object',
  properties: {
    command: { type: 'string', enum: commands },
    path: { type: 'string', description: 'Absolute path of the file or directory.' },
    file_text: { type: 'string', description: 'create: the new file content.' },
    old_str: { type: 'string', description: 'str_replace: the exact text to replace (must occur once).' },
    new_str: { type: 'string', description: 'str_replace: the replacement.' },
    insert_line: { type: 'integer', description: 'insert: the line after which to insert.' },
    insert_text: { type: 'string', description: 'insert: the text to insert.' },
    view_range: { type: 'array', items: { type: 'integer' }, description: 'view: [first line, last line], -1 for the end.' },
  },
  required: ['command', 'path'],
});

const textEditor = (name: string, commands: string[]): ClientToolSchema => ({
  name,
  description: 'View, create and edit text files: view a file or directory, create a file, replace one exact occurrence of a string, insert text after a line.',
  parameters: editorCommands(commands),
});

const memory: ClientToolSchema = {
  name: 'memory',
  description: 'A memory directory at /memories that persists between conversations: view, create, edit, delete and rename files in it.',
  parameters: {
    type: 'object',
    properties: {
      command: { type: 'string', enum: ['view', 'create', 'str_replace', 'insert', 'delete', 'rename'] },
      path: { type: 'string' },
      file_text: { type: 'string' },
      old_str: { type: 'string' },
      new_str: { type: 'string' },
      insert_line: { type: 'integer' },
      insert_text: { type: 'string' },
      view_range: { type: 'array', items: { type: 'integer' } },
      old_path: { type: 'string' },
      new_path: { type: 'string' },
    },
    required: ['command'],
  },
};

const OLD_EDITOR = ['view', 'create', 'str_replace', 'insert', 'undo_edit'];
const EDITOR = ['view', 'create', 'str_replace', 'insert'];

/** Client tools by type. */
export const CLIENT_TOOL_SCHEMAS: Readonly<Record<string, ClientToolSchema>> = {
  bash_20241022: bash,
  bash_20250124: bash,
  text_editor_20241022: textEditor('str_replace_editor', OLD_EDITOR),
  text_editor_20250124: textEditor('str_replace_editor', OLD_EDITOR),
  text_editor_20250429: textEditor('str_replace_based_edit_tool', EDITOR),
  text_editor_20250728: textEditor('str_replace_based_edit_tool', EDITOR),
  memory_20250818: memory,
};

/** Client tools whose actions need a screen or a browser described to the model: refused (400) rather than offered half-described. */
export const UNSUPPORTED_CLIENT_TOOLS = ['computer_', 'browser_toolset_'];

/** Server tools by the prefix of their type (dated versions come and go). */
const SERVER_TOOL_PREFIXES = ['web_search_', 'web_fetch_', 'code_execution_', 'tool_search_tool_', 'advisor_', 'mcp_toolset'];

export function isServerTool(type: string): boolean {
  return SERVER_TOOL_PREFIXES.some((prefix) => type.startsWith(prefix)) || type === 'tool_search_tool_regex' || type === 'tool_search_tool_bm25';
}
