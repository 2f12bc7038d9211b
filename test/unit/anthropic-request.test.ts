import { describe, expect, it } from 'vitest';
import { parseMessages } from '../../src/api/anthropic/schema.js';
import { EFFORT_BUDGET, toChatRequest } from '../../src/api/anthropic/to-chat.js';
import { Sealer } from '../../src/core/sealed.js';
import { MEDIA_MARKER } from '../../src/core/tasks/chat.js';

/** Anthropic Messages requests → the chat task's request: what the model is given, field by field. */

const sealer = Sealer.fromSecret('test');
const seal = { open: (s: string) => sealer.open('anthropic-thinking', s) };
const translate = (body: Record<string, unknown>) => toChatRequest(parseMessages({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...body }), seal);
const png = 'iVBORw0KGgo=';

describe('Anthropic requests to the chat task', () => {
  it('thinking: adaptive takes its budget from the effort, enabled its own, disabled and absent none', () => {
    expect(translate({ thinking: { type: 'adaptive' }, output_config: { effort: 'low' } }).request).toMatchObject({ thinking: true, thinkingBudget: EFFORT_BUDGET.low, reasoningEffort: 'low' });
    expect(translate({ thinking: { type: 'adaptive' } }).request).toMatchObject({ thinking: true, thinkingBudget: EFFORT_BUDGET.high });
    expect(translate({ thinking: { type: 'adaptive' }, output_config: { effort: 'max' } }).request.thinkingBudget).toBeUndefined();
    expect(translate({ thinking: { type: 'enabled', budget_tokens: 2048 } }).request).toMatchObject({ thinking: true, thinkingBudget: 2048 });
    expect(translate({ thinking: { type: 'disabled' } }).request.thinking).toBe(false);
    expect(translate({ thinking: { type: 'between_tools' } }).request.thinking).toBe(false);
    expect(translate({}).request.thinking).toBe(false);
    expect(translate({ thinking: { type: 'adaptive', display: 'omitted' } }).display).toBe('omitted');
    // A system turn's own effort (beta) wins for the turn it ends.
    const perTurn = translate({ thinking: { type: 'adaptive' }, output_config: { effort: 'high' }, messages: [{ role: 'user', content: 'q' }, { role: 'system', content: 'x', output_config: { effort: 'medium' } }] });
    expect(perTurn.request.thinkingBudget).toBe(EFFORT_BUDGET.medium);
  });

  it('system turns stand where they are; clear_at hides one once a user turn follows; consecutive user turns join', () => {
    const { request } = translate({
      system: [{ type: 'text', text: 'Top.' }],
      messages: [
        { role: 'user', content: 'a' },
        { role: 'system', content: 'Hidden later.', clear_at: 'next_user_message' },
        { role: 'assistant', content: 'b' },
        { role: 'user', content: 'c' },
        { role: 'user', content: [{ type: 'text', text: 'd' }, { type: 'text', text: 'e' }] },
        { role: 'system', content: 'Now in French.' },
      ],
    });
    expect(request.messages.map((m) => [m.role, m.content])).toEqual([
      ['system', 'Top.'],
      ['user', 'a'],
      ['assistant', 'b'],
      ['user', 'c\n\nd\ne'],
      ['system', 'Now in French.'],
    ]);
  });

  it('tool_use blocks are calls; tool_result blocks are tool messages, their images in a user turn after them', () => {
    const { request } = translate({
      tools: [{ name: 'shot', input_schema: { type: 'object' } }],
      messages: [
        { role: 'user', content: 'look' },
        { role: 'assistant', content: [{ type: 'text', text: 'ok' }, { type: 'tool_use', id: 'toolu_1', name: 'shot', input: { x: 1 } }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'taken' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } }] },
            { type: 'text', text: 'what is it?' },
          ],
        },
      ],
    });
    expect(request.messages[1]).toMatchObject({ role: 'assistant', content: 'ok', toolCalls: [{ id: 'toolu_1', name: 'shot', arguments: '{"x":1}' }] });
    expect(request.messages[2]).toMatchObject({ role: 'tool', toolCallId: 'toolu_1', content: 'taken' });
    expect(request.messages[3]).toMatchObject({ role: 'user', content: `${MEDIA_MARKER}what is it?` });
    expect(request.messages[3]!.media![0]!.param).toBe('messages.2.content.0.content.1');
    // An error result says so to the model.
    const failed = translate({ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'shot', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', is_error: true, content: 'boom' }] }] });
    expect(failed.request.messages[1]!.content).toBe('{"error":"boom"}');
  });

  it('a thinking block gives its turn the reasoning sealed in its signature, and nothing for a signature it cannot open', () => {
    const signature = sealer.seal('anthropic-thinking', 'I should check the weather.');
    const turn = (sig: string) => translate({ messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: [{ type: 'thinking', thinking: '', signature: sig }, { type: 'text', text: 'a' }] }] }).request.messages[1];
    expect(turn(signature)!.reasoning).toBe('I should check the weather.');
    expect(turn('forged')!.reasoning).toBeUndefined();
    expect(turn(Sealer.fromSecret('other').seal('anthropic-thinking', 'x'))!.reasoning).toBeUndefined();
  });

  it('tools: custom ones as given (examples in the description), client tools with their documented input, server tools left out and named', () => {
    const { request, omitted } = translate({
      tools: [
        { name: 'lookup', description: 'Looks up', input_schema: { type: 'object', properties: { q: { type: 'string' } } }, input_examples: [{ q: 'x' }], cache_control: { type: 'ephemeral' }, strict: true },
        { type: 'bash_20250124', name: 'bash' },
        { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool', max_characters: 1000 },
        { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
        { type: 'code_execution_20250825', name: 'code_execution' },
      ],
      mcp_servers: [{ type: 'url', name: 'docs', url: 'https://example.com/mcp' }],
    });
    expect(request.tools!.map((t) => t.name)).toEqual(['lookup', 'bash', 'str_replace_based_edit_tool']);
    expect(request.tools![0]!.description).toContain('Example inputs:\n{"q":"x"}');
    expect(request.tools![1]!.parameters).toMatchObject({ properties: { command: { type: 'string' } } });
    expect(omitted).toEqual([
      { param: 'tools.3', type: 'web_search_20250305' },
      { param: 'tools.4', type: 'code_execution_20250825' },
      { param: 'mcp_servers.0', type: 'mcp_servers' },
    ]);
  });

  it.each([
    ['an unknown tool type', { tools: [{ type: 'teleport_20990101', name: 'x' }] }, /unknown tool type 'teleport_20990101'/],
    ['a computer-use tool', { tools: [{ type: 'computer_20250124', name: 'computer', display_width_px: 1, display_height_px: 1 }] }, /not supported here/],
    ['every tool deferred', { tools: [{ name: 'a', input_schema: { type: 'object' }, defer_loading: true }] }, /At least one tool must be non-deferred/],
    ['a client tool under another name', { tools: [{ type: 'bash_20250124', name: 'shell' }] }, /must be 'bash'/],
    ['tool_choice naming a hosted tool', { tools: [{ name: 'a', input_schema: { type: 'object' } }, { type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'tool', name: 'web_search' } }, /not one of the tools/],
    ['a compaction edit', { context_management: { edits: [{ type: 'compact_20260112' }] } }, /compaction/],
    ['a PDF document', { messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'x' } }] }] }, /only text documents/],
  ])('refuses %s with a 400 naming it', (_, body, message) => {
    expect(() => translate(body)).toThrow(message);
  });
});
