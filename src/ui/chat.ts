/** Chat: streamed completions (POST /v1/chat/completions, stream: true), reasoning folded, a stop button. */
import { bindModelSelect, call, errorText, readSse } from './api.js';
import { $, h, numberOrUndefined, setStatus } from './dom.js';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
}

interface ChunkDelta {
  content?: string | null;
  reasoning_content?: string | null;
}

interface Chunk {
  choices?: Array<{ delta?: ChunkDelta; finish_reason?: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
  error?: { message: string };
}

export function setupChat(): void {
  const model = $<HTMLSelectElement>('#chat-model');
  const log = $('#chat-log');
  const input = $<HTMLTextAreaElement>('#chat-input');
  const send = $<HTMLButtonElement>('#chat-send');
  const stop = $<HTMLButtonElement>('#chat-stop');
  const status = $('#chat-status');
  const stats = $('#chat-stats');
  bindModelSelect(model, ['chat']);

  const history: Turn[] = [];
  let running: AbortController | undefined;

  const scroll = () => (log.scrollTop = log.scrollHeight);
  const bubble = (role: string, text = '') => {
    log.querySelector('.empty')?.remove();
    const content = h('div.content', { text });
    const node = h('div.msg', {}, h('div.who', { text: role }), content);
    node.classList.add(role);
    log.append(node);
    scroll();
    return { node, content };
  };

  const body = (): Record<string, unknown> => {
    const system = $<HTMLTextAreaElement>('#chat-system').value.trim();
    const thinking = $<HTMLSelectElement>('#chat-thinking').value;
    const request: Record<string, unknown> = {
      model: model.value,
      messages: [...(system ? [{ role: 'system', content: system }] : []), ...history],
      stream: true,
      stream_options: { include_usage: true },
      temperature: numberOrUndefined($<HTMLInputElement>('#chat-temperature')),
      top_p: numberOrUndefined($<HTMLInputElement>('#chat-top-p')),
      max_tokens: numberOrUndefined($<HTMLInputElement>('#chat-max-tokens')),
      seed: numberOrUndefined($<HTMLInputElement>('#chat-seed')),
      thinking_tokens: numberOrUndefined($<HTMLInputElement>('#chat-thinking-tokens')),
    };
    if (thinking) request.thinking_enabled = thinking === 'on';
    const extra = $<HTMLTextAreaElement>('#chat-extra').value.trim();
    if (extra) {
      let fields: unknown;
      try {
        fields = JSON.parse(extra);
      } catch {
        throw new Error('More fields: not valid JSON');
      }
      if (!fields || typeof fields !== 'object' || Array.isArray(fields)) throw new Error('More fields: give a JSON object, e.g. {"top_k": 40}');
      Object.assign(request, fields);
    }
    return request;
  };

  const ask = async () => {
    const text = input.value.trim();
    if (!text || running || !model.value) return;
    input.value = '';
    history.push({ role: 'user', content: text });
    bubble('user', text);
    const answer = bubble('assistant');
    answer.node.dataset.streaming = 'true';
    let reasoning: { details: HTMLDetailsElement; summary: HTMLElement; text: HTMLElement } | undefined;
    const meta = h('div.meta');
    answer.node.append(meta);

    running = new AbortController();
    send.disabled = true;
    stop.disabled = false;
    setStatus(status, 'waiting for the first token…', 'busy');
    const started = performance.now();
    let first: number | undefined;
    let pieces = 0;
    let finish: string | null | undefined;
    let usage: Chunk['usage'];
    let content = '';
    try {
      const res = await call('/v1/chat/completions', { method: 'POST', json: body(), signal: running.signal });
      for await (const message of readSse(res)) {
        if (message.data === '[DONE]') break;
        const chunk = JSON.parse(message.data) as Chunk;
        if (chunk.error) throw new Error(chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        finish = choice.finish_reason ?? finish;
        const delta = choice.delta ?? {};
        if (delta.reasoning_content) {
          if (!reasoning) {
            const summary = h('summary', { text: 'Thinking…' });
            const textNode = h('div.text');
            const details = h('details.reasoning', {}, summary, textNode);
            answer.node.insertBefore(details, answer.content);
            reasoning = { details, summary, text: textNode };
          }
          reasoning.text.textContent += delta.reasoning_content;
        }
        if (delta.content) {
          content += delta.content;
          answer.content.textContent = content;
        }
        if (delta.content || delta.reasoning_content) {
          pieces++;
          first ??= performance.now();
          setStatus(status, 'generating…', 'busy');
          scroll();
        }
      }
      setStatus(status, finish === 'length' ? 'stopped at max tokens' : '', finish === 'length' ? 'idle' : 'ok');
    } catch (error) {
      const stopped = running.signal.aborted;
      setStatus(status, stopped ? 'stopped' : errorText(error), stopped ? 'idle' : 'error');
      // A turn that got no answer leaves the conversation as it was (its bubbles stay on screen).
      if (!content) history.pop();
      if (!stopped && !content) {
        answer.node.classList.add('error');
        answer.content.textContent = errorText(error);
      }
    } finally {
      const seconds = (performance.now() - (first ?? started)) / 1000;
      const tokens = usage?.completion_tokens ?? pieces;
      if (reasoning) reasoning.summary.textContent = `Reasoning · ${reasoning.text.textContent?.length ?? 0} chars`;
      const line = [
        first !== undefined ? `first token ${Math.round(first - started)} ms` : '',
        tokens ? `${tokens} tokens` : '',
        tokens && seconds > 0 ? `${(tokens / seconds).toFixed(1)} tok/s` : '',
        finish ? `finish: ${finish}` : running?.signal.aborted ? 'stopped' : '',
      ].filter(Boolean);
      meta.textContent = line.join(' · ');
      stats.textContent = usage ? `${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens` : '';
      delete answer.node.dataset.streaming;
      answer.node.dataset.done = 'true';
      if (content) history.push({ role: 'assistant', content });
      running = undefined;
      send.disabled = false;
      stop.disabled = true;
      input.focus();
    }
  };

  $('#chat-form').addEventListener('submit', (e) => {
    e.preventDefault();
    void ask();
  });
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      void ask();
    }
  });
  stop.addEventListener('click', () => running?.abort());
  $('#chat-clear').addEventListener('click', () => {
    running?.abort();
    history.length = 0;
    log.replaceChildren(h('p.empty.muted', { text: 'Messages stream here. Enter sends, Shift+Enter adds a line.' }));
    stats.textContent = '';
    setStatus(status, '');
  });
}
