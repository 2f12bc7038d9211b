/**
 * Chat: streamed completions (POST /v1/chat/completions, stream: true),
 * reasoning folded, a stop button. With "Responses API" on, each turn is a
 * POST /v1/responses that continues the last stored response
 * (previous_response_id) instead of resending the conversation. A user
 * message may carry images and audio clips (chat-attach.ts); they stay in the
 * conversation, so later turns resend them.
 */
import { bindModelSelect, call, errorText, missingModel } from './api.js';
import { mediaView, setupAttachments } from './chat-attach.js';
import { messagesOf, type Attachment, type Turn } from './chat-media.js';
import { completionPieces, responsePieces, type Outcome, type TokenProbability } from './chat-stream.js';
import { $, h, numberOrUndefined, setStatus } from './dom.js';

export function setupChat(): void {
  const model = $<HTMLSelectElement>('#chat-model');
  const log = $('#chat-log');
  const input = $<HTMLTextAreaElement>('#chat-input');
  const send = $<HTMLButtonElement>('#chat-send');
  const stop = $<HTMLButtonElement>('#chat-stop');
  const status = $('#chat-status');
  const stats = $('#chat-stats');
  const responses = $<HTMLInputElement>('#chat-responses');
  const responseLine = $('#chat-response');
  const seed = $<HTMLInputElement>('#chat-seed');
  const probabilitiesOn = $<HTMLInputElement>('#chat-probabilities');
  bindModelSelect(model, ['chat']);

  const history: Turn[] = [];
  let running: AbortController | undefined;
  /** The stored response the next Responses API turn continues. */
  let previousId: string | undefined;
  const setPrevious = (id: string | undefined) => {
    previousId = id;
    responseLine.textContent = id ? `response ${id}` : '';
  };
  responses.addEventListener('change', () => {
    // The server's conversation misses turns made the other way: the next turn starts a new one from the history.
    setPrevious(undefined);
    // The Responses API has no seed.
    seed.disabled = responses.checked;
  });

  const attachments = setupAttachments(model, () => (responses.checked ? 'responses' : 'chat'), () => history.flatMap((t) => t.attachments ?? []), status);

  const scroll = () => (log.scrollTop = log.scrollHeight);
  const bubble = (role: string, text = '', media: readonly Attachment[] = []) => {
    log.querySelector('.empty')?.remove();
    const content = h('div.content', { text });
    const node = h('div.msg', {}, h('div.who', { text: role }), content, mediaView(media));
    node.classList.add(role);
    log.append(node);
    scroll();
    return { node, content };
  };

  /** The request for the turn whose user message is the last of `history`. */
  const body = (): Record<string, unknown> => {
    const system = $<HTMLTextAreaElement>('#chat-system').value.trim();
    const thinking = $<HTMLSelectElement>('#chat-thinking').value;
    const maxTokens = numberOrUndefined($<HTMLInputElement>('#chat-max-tokens'));
    const request: Record<string, unknown> = {
      model: model.value,
      stream: true,
      temperature: numberOrUndefined($<HTMLInputElement>('#chat-temperature')),
      top_p: numberOrUndefined($<HTMLInputElement>('#chat-top-p')),
      thinking_tokens: numberOrUndefined($<HTMLInputElement>('#chat-thinking-tokens')),
      ...(probabilitiesOn.checked ? (responses.checked ? { include: ['message.output_text.logprobs'], top_logprobs: 5 } : { logprobs: true, top_logprobs: 5 }) : {}),
      ...(responses.checked
        ? {
            instructions: system || undefined,
            input: responsesInput(),
            previous_response_id: previousId,
            max_output_tokens: maxTokens,
          }
        : {
            messages: [...(system ? [{ role: 'system', content: system }] : []), ...messagesOf(history, 'chat')],
            stream_options: { include_usage: true },
            max_tokens: maxTokens,
            seed: numberOrUndefined(seed),
          }),
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

  /** Continuing a stored response, only the new message (a string when it is text alone); otherwise the conversation on screen. */
  const responsesInput = () => {
    if (!previousId && history.length > 1) return messagesOf(history, 'responses');
    const [last] = messagesOf(history.slice(-1), 'responses');
    return typeof last!.content === 'string' ? last!.content : [last];
  };

  const ask = async () => {
    const text = input.value.trim();
    if (!model.value) return setStatus(status, missingModel(['chat']), 'error');
    if ((!text && !attachments.pending) || running) return;
    const refused = attachments.problem();
    if (refused) return setStatus(status, refused, 'error');
    input.value = '';
    const media = attachments.take();
    history.push({ role: 'user', content: text, attachments: media });
    bubble('user', text, media);
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
    const outcome: Outcome = {};
    let content = '';
    const probabilities: TokenProbability[] = [];
    try {
      const viaResponses = responses.checked;
      const res = await call(viaResponses ? '/v1/responses' : '/v1/chat/completions', { method: 'POST', json: body(), signal: running.signal });
      for await (const delta of (viaResponses ? responsePieces : completionPieces)(res, outcome)) {
        if (delta.reasoning) {
          if (!reasoning) {
            const summary = h('summary', { text: 'Thinking…' });
            const textNode = h('div.text');
            const details = h('details.reasoning', {}, summary, textNode);
            answer.node.insertBefore(details, answer.content);
            reasoning = { details, summary, text: textNode };
          }
          reasoning.text.textContent += delta.reasoning;
        }
        if (delta.content) {
          content += delta.content;
          answer.content.textContent = content;
        }
        if (delta.logprobs) probabilities.push(...delta.logprobs);
        if (delta.content || delta.reasoning) {
          pieces++;
          first ??= performance.now();
          setStatus(status, 'generating…', 'busy');
          scroll();
        }
      }
      // The tokens, coloured by probability, each with its alternatives on hover.
      if (probabilities.length && probabilities.map((t) => t.token).join('') === content) answer.content.replaceChildren(...probabilities.map(tokenView));
      if (outcome.responseId) setPrevious(outcome.responseId);
      const cut = outcome.finish === 'length';
      setStatus(status, cut ? 'stopped at max tokens' : '', cut ? 'idle' : 'ok');
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
      const { finish, usage } = outcome;
      const tokens = usage?.completion ?? pieces;
      if (reasoning) reasoning.summary.textContent = `Reasoning · ${reasoning.text.textContent?.length ?? 0} chars`;
      const line = [
        first !== undefined ? `first token ${Math.round(first - started)} ms` : '',
        tokens ? `${tokens} tokens` : '',
        tokens && seconds > 0 ? `${(tokens / seconds).toFixed(1)} tok/s` : '',
        finish ? `finish: ${finish}` : running?.signal.aborted ? 'stopped' : '',
      ].filter(Boolean);
      meta.textContent = line.join(' · ');
      stats.textContent = usage ? `${usage.prompt} prompt + ${usage.completion} completion tokens` : '';
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
    attachments.clear();
    history.length = 0;
    setPrevious(undefined);
    log.replaceChildren(h('p.empty.muted', { text: 'Messages stream here. Enter sends, Shift+Enter adds a line.' }));
    stats.textContent = '';
    setStatus(status, '');
  });
}

/** A token of the answer, its background from red (unlikely) to clear (certain), its alternatives in its title. */
function tokenView(token: TokenProbability): HTMLElement {
  const p = Math.exp(token.logprob);
  const alternatives = token.top_logprobs.map((t) => `${JSON.stringify(t.token)} ${(Math.exp(t.logprob) * 100).toPrecision(3)}%`).join('\n');
  const span = h('span.token', { text: token.token, title: `${(p * 100).toPrecision(3)}%\n${alternatives}` });
  span.style.backgroundColor = `rgba(194, 53, 43, ${(0.45 * (1 - p)).toFixed(3)})`;
  span.dataset.p = p.toPrecision(3);
  return span;
}
