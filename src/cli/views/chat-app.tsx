import { render } from 'ink';
import type { Engine } from '../../core/engine.js';
import { chat, type ChatRequest } from '../../core/tasks/chat.js';
import { ChatView } from './chat-view.js';

/** Runs the interactive chat until /exit or Ctrl-C while idle. */
export async function runChatView({ engine, model, system, options }: { engine: Engine; model: string; system?: string; options: Omit<ChatRequest, 'model' | 'messages'> }) {
  const app = render(<ChatView model={model} initialSystem={system} send={(messages, signal) => chat(engine, { model, messages, ...options }, signal)} />, {
    // Ctrl-C stops a generation first; the view exits itself when idle.
    exitOnCtrlC: false,
  });
  await app.waitUntilExit();
}
