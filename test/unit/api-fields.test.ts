import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { COUNT_TOKENS_FIELDS, HEADER_PARAMETERS, MESSAGE_FIELDS } from '../../src/api/anthropic/fields.js';
import { RESPONSE_FIELDS } from '../../src/api/responses/fields.js';

/**
 * Every request field of the providers' references is placed: handled,
 * ignored or refused (src/api/anthropic/fields.ts, src/api/responses/fields.ts).
 * The reference is what the official SDKs installed here type: an upgrade
 * of @anthropic-ai/sdk or openai that adds a field fails this test until
 * the field is placed, so a client sending it never meets an unexplained 400.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The property names of each exported type alias of `source`, as the TypeScript compiler resolves them. */
function propertiesOf(source: string): Record<string, string[]> {
  const file = `${root}test/.api-fields-probe.ts`;
  const host = ts.createCompilerHost({});
  const read = host.readFile.bind(host);
  const exists = host.fileExists.bind(host);
  host.readFile = (f) => (f === file ? source : read(f));
  host.fileExists = (f) => f === file || exists(f);
  const program = ts.createProgram([file], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022, strict: true, noEmit: true }, host);
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
  return Object.fromEntries(checker.getExportsOfModule(module).map((symbol) => [symbol.name, checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(symbol)).map((p) => p.name)]));
}

const reference = propertiesOf(`
import type { MessageCreateParamsBase as Messages, MessageCountTokensParams as CountTokens } from '@anthropic-ai/sdk/resources/messages/messages';
import type { MessageCreateParamsBase as BetaMessages, MessageCountTokensParams as BetaCountTokens } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { ResponseCreateParamsBase as Responses } from 'openai/resources/responses/responses';
export type AnthropicMessages = Messages;
export type AnthropicBetaMessages = BetaMessages;
export type AnthropicCountTokens = CountTokens;
export type AnthropicBetaCountTokens = BetaCountTokens;
export type OpenAIResponses = Responses;
`);

const unplaced = (fields: readonly string[], placed: Record<string, unknown>) => fields.filter((f) => !(f in placed) && !(HEADER_PARAMETERS as readonly string[]).includes(f));

describe('request fields of the references', () => {
  it('the SDK types were read', () => {
    expect(reference.AnthropicMessages).toContain('max_tokens');
    expect(reference.OpenAIResponses).toContain('previous_response_id');
  });

  it.each([
    ['Anthropic messages (GA)', 'AnthropicMessages', MESSAGE_FIELDS],
    ['Anthropic messages (beta)', 'AnthropicBetaMessages', MESSAGE_FIELDS],
    ['Anthropic count_tokens (GA)', 'AnthropicCountTokens', COUNT_TOKENS_FIELDS],
    ['Anthropic count_tokens (beta)', 'AnthropicBetaCountTokens', COUNT_TOKENS_FIELDS],
    ['OpenAI responses', 'OpenAIResponses', RESPONSE_FIELDS],
  ] as const)('%s: every field is handled, ignored or refused', (_, type, placed) => {
    expect(unplaced(reference[type]!, placed)).toEqual([]);
  });
});
