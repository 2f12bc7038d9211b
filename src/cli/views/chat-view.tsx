import { Box, Text, useApp, useInput } from 'ink';
import { useRef, useState } from 'react';
import type { ChatDelta, ChatMessage } from '../../core/tasks/chat.js';

/**
 * The interactive `lserve run` chat: streamed answers, reasoning dimmed and
 * collapsible (Tab), /clear, /system <text>, /exit, Ctrl-C stops a
 * generation (and leaves when idle), tokens/s after each answer. The
 * generation itself is injected, so the view knows nothing of the engine.
 */

export type Send = (messages: ChatMessage[], signal: AbortSignal) => AsyncIterable<ChatDelta>;

interface Turn {
  user: string;
  reasoning: string;
  answer: string;
  stats?: string;
}

export function ChatView({ model, send, initialSystem }: { model: string; send: Send; initialSystem?: string }) {
  const { exit } = useApp();
  const [turns, setTurns] = useState<Turn[]>([]);
  const [input, setInputState] = useState('');
  // Keystrokes can arrive faster than renders; the ref always holds the true line.
  const line = useRef('');
  const setInput = (next: (v: string) => string) => {
    line.current = next(line.current);
    setInputState(line.current);
  };
  const [busy, setBusy] = useState(false);
  const [showReasoning, setShowReasoning] = useState(true);
  const [notice, setNotice] = useState('');
  const system = useRef(initialSystem);
  const history = useRef<ChatMessage[]>([]);
  const controller = useRef<AbortController | null>(null);

  const update = (fn: (turn: Turn) => Turn) => setTurns((all) => [...all.slice(0, -1), fn(all.at(-1)!)]);

  const submit = async (line: string) => {
    const text = line.trim();
    if (!text) return;
    if (text === '/exit') return exit();
    if (text === '/clear') {
      history.current = [];
      setTurns([]);
      setNotice('conversation cleared');
      return;
    }
    if (text.startsWith('/system')) {
      system.current = text.slice('/system'.length).trim() || undefined;
      history.current = [];
      setTurns([]);
      setNotice(system.current ? `system prompt set; conversation cleared` : 'system prompt removed');
      return;
    }
    setNotice('');
    const messages: ChatMessage[] = [...(system.current ? [{ role: 'system' as const, content: system.current }] : []), ...history.current, { role: 'user', content: text }];
    setTurns((all) => [...all, { user: text, reasoning: '', answer: '' }]);
    setBusy(true);
    const abort = new AbortController();
    controller.current = abort;
    let answer = '';
    let first = 0;
    try {
      for await (const delta of send(messages, abort.signal)) {
        if ((delta.type === 'content' || delta.type === 'reasoning') && first === 0) first = performance.now();
        if (delta.type === 'content') {
          answer += delta.text;
          update((t) => ({ ...t, answer: t.answer + delta.text }));
        } else if (delta.type === 'reasoning') {
          update((t) => ({ ...t, reasoning: t.reasoning + delta.text }));
        } else if (delta.type === 'done') {
          const seconds = first ? (performance.now() - first) / 1000 : 0;
          const rate = seconds > 0 ? (delta.usage.completionTokens / seconds).toFixed(1) : '–';
          const stopped = abort.signal.aborted ? ' · stopped' : delta.finishReason === 'length' ? ' · max tokens' : '';
          update((t) => ({ ...t, stats: `${delta.usage.completionTokens} tokens · ${rate} tok/s${stopped}` }));
        }
      }
      history.current = [...messages.filter((m) => m.role !== 'system'), { role: 'assistant', content: answer }];
    } catch (error) {
      update((t) => ({ ...t, stats: `error: ${(error as Error).message}` }));
    } finally {
      controller.current = null;
      setBusy(false);
    }
  };

  useInput((char, key) => {
    if (key.ctrl && char === 'c') {
      if (controller.current) controller.current.abort(new Error('stopped'));
      else exit();
      return;
    }
    if (key.tab) return setShowReasoning((v) => !v);
    if (key.return) {
      // Typing ahead during a generation is fine; sending waits for it to end.
      if (controller.current) return;
      const text = line.current;
      setInput(() => '');
      void submit(text);
    } else if (key.backspace || key.delete) {
      setInput((v) => v.slice(0, -1));
    } else if (char && !key.ctrl && !key.meta) {
      setInput((v) => v + char);
    }
  });

  return (
    <Box flexDirection="column">
      <Text dimColor>
        {model} · /clear /system &lt;text&gt; /exit · Tab shows/hides reasoning · Ctrl-C stops a generation
      </Text>
      {turns.map((turn, i) => (
        <Box key={i} flexDirection="column" marginTop={1}>
          <Text color="cyan">› {turn.user}</Text>
          {turn.reasoning ? (
            showReasoning ? <Text dimColor>{turn.reasoning.trim()}</Text> : <Text dimColor>[reasoning hidden: {turn.reasoning.length} chars — Tab to show]</Text>
          ) : null}
          <Text>{turn.answer}</Text>
          {turn.stats ? <Text dimColor>{turn.stats}</Text> : null}
        </Box>
      ))}
      {notice ? <Text dimColor>{notice}</Text> : null}
      <Box marginTop={1}>
        <Text color={busy ? 'gray' : 'green'}>{busy ? '… ' : '› '}</Text>
        <Text>{input}</Text>
      </Box>
    </Box>
  );
}
