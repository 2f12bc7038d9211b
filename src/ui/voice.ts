/**
 * Voice: a spoken conversation with a chat model over the Realtime API
 * (GET /v1/realtime, a WebSocket). The microphone goes up as base64 PCM16,
 * the server's VAD takes the turns (speech_started / speech_stopped), each
 * turn's transcript and the answer's transcript show as they come, and the
 * answer's audio plays as it arrives, its pieces scheduled back to back.
 * Speaking over an answer (barge-in) stops its playback at once and tells
 * the server, with conversation.item.truncate, how much of it was heard.
 *
 * For the browser tests the panel shows on itself what it received:
 * data-state, data-audio-bytes (of response.output_audio.delta) and
 * data-truncated (truncations sent).
 */
import { bindModelSelect, defaultModel, errorText, getJson, missingModel, modelEvents, openSocket } from './api.js';
import { captureMicrophone, PcmPlayer, type Capture } from './audio.js';
import { $, h, numberOrUndefined, setStatus } from './dom.js';
import { base64ToBytes } from './pcm.js';
import { appendEvent, INPUT_RATE, OUTPUT_RATE, sessionUpdate, truncateEvent } from './voice-session.js';

interface ServerEvent {
  type: string;
  item_id?: string;
  delta?: string;
  transcript?: string;
  audio_end_ms?: number;
  error?: { message: string };
  session?: { id: string };
}

interface Live {
  socket: WebSocket;
  player: PcmPlayer;
  capture?: Capture;
  /** The user is speaking (between the VAD's speech_started and speech_stopped). */
  speaking: boolean;
  /** A turn ended and its answer has not started yet. */
  waiting: boolean;
  responding: boolean;
  /** Assistant items cut by a barge-in: audio of theirs still on the way is not played. */
  cut: Set<string>;
  /** The user pressed Stop. */
  stopping: boolean;
  /** An error is on show: the close that follows does not replace it. */
  failed: boolean;
  /** Redraws the state while the session lasts (playback ends on its own clock). */
  tick: number;
}

const STATES = { connecting: 'connecting', listening: 'listening', user: 'you are speaking', thinking: 'thinking', speaking: 'speaking' } as const;

export function setupVoice(): void {
  const panel = $('#panel-voice');
  const model = $<HTMLSelectElement>('#voice-model');
  const transcriber = $<HTMLSelectElement>('#voice-stt');
  const voice = $<HTMLSelectElement>('#voice-voice');
  const voiceNote = $('#voice-voice-note');
  const start = $<HTMLButtonElement>('#voice-start');
  const level = $<HTMLProgressElement>('#voice-level');
  const status = $('#voice-status');
  const badge = $('#voice-state');
  const meta = $('#voice-meta');
  const log = $('#voice-log');
  const hint = $('#voice-log .empty');
  const settings = [...$<HTMLFormElement>('#voice-settings').elements, model] as Array<HTMLInputElement | HTMLSelectElement>;
  bindModelSelect(model, ['chat']);
  bindModelSelect(transcriber, ['asr']);

  // ─── voices: the speakers of the speech model the session speaks with (the server's default) ───
  let voicesAsked = 0;
  const fillVoices = async () => {
    const asked = ++voicesAsked;
    const keep = voice.value;
    // The Realtime API names no speech model: the server speaks with its default one.
    const tts = defaultModel(['tts']);
    voice.replaceChildren(new Option('model default', ''));
    if (!tts) {
      voiceNote.textContent = 'No speech model is installed: answers cannot be spoken (Models: pull piper-en-lessac).';
      return;
    }
    voiceNote.textContent = `spoken by ${tts.id}, the default speech model`;
    try {
      const info = await getJson<{ supported_speakers?: string[] }>(`/v1/audio/info?model=${encodeURIComponent(tts.id)}`);
      if (asked !== voicesAsked) return;
      for (const speaker of info.supported_speakers ?? []) voice.append(new Option(speaker, speaker));
      voice.value = keep;
      if (voice.value !== keep) voice.value = '';
    } catch {
      // the picker keeps "model default"
    }
  };
  modelEvents.addEventListener('change', () => void fillVoices());

  // ─── the transcript ───
  const lines = new Map<string, { node: HTMLElement; content: HTMLElement; meta: HTMLElement }>();
  const line = (item: string, role: 'user' | 'assistant') => {
    let found = lines.get(item);
    if (!found) {
      hint.remove();
      const content = h('div.content');
      const meta = h('div.meta');
      const node = h(`div.msg.${role}`, { 'data-item': item }, h('div.who', { text: role === 'user' ? 'you' : 'assistant' }), content, meta);
      log.append(node);
      found = { node, content, meta };
      lines.set(item, found);
    }
    log.scrollTop = log.scrollHeight;
    return found;
  };
  $('#voice-clear').addEventListener('click', () => {
    lines.clear();
    log.replaceChildren(hint);
  });

  // ─── the session ───
  let live: Live | undefined;
  const count = (name: string, by: number) => (panel.dataset[name] = String(Number(panel.dataset[name] ?? 0) + by));
  const showState = () => {
    const s = live;
    const state = !s ? undefined : !s.capture ? 'connecting' : s.speaking ? 'user' : s.player.playing ? 'speaking' : s.responding || s.waiting ? 'thinking' : 'listening';
    badge.textContent = state ? STATES[state] : '';
    if (state) panel.dataset.state = state;
    else delete panel.dataset.state;
  };

  const send = (s: Live, event: Record<string, unknown>) => {
    if (s.socket.readyState === WebSocket.OPEN) s.socket.send(JSON.stringify(event));
  };
  const fail = (s: Live, message: string) => {
    s.failed = true;
    setStatus(status, message, 'error');
  };

  /** Barge-in: the answer stops at once; the server keeps of it what was heard. */
  const interrupt = (s: Live) => {
    const heard = s.player.interrupt();
    if (!heard?.item) return;
    s.cut.add(heard.item);
    lines.get(heard.item)?.node.classList.add('cut');
    send(s, truncateEvent(heard.item, heard.seconds));
    count('truncated', 1);
  };

  const startMicrophone = async (s: Live) => {
    try {
      const capture = await captureMicrophone(
        (pcm, rms) => {
          level.value = Math.min(1, rms * 4);
          send(s, appendEvent(pcm));
        },
        INPUT_RATE,
        { echoCancellation: true },
      );
      if (live !== s) return void capture.stop();
      s.capture = capture;
      setStatus(status, 'listening: speak, and pause to let it answer', 'busy');
    } catch (error) {
      fail(s, `microphone: ${errorText(error)}`);
      s.socket.close(1000);
    }
  };

  const handle = (s: Live, event: ServerEvent) => {
    const item = event.item_id ?? '';
    switch (event.type) {
      case 'session.created':
        meta.textContent = `${event.session?.id ?? ''} · ${model.value}`;
        send(
          s,
          sessionUpdate({
            instructions: $<HTMLTextAreaElement>('#voice-instructions').value,
            transcriptionModel: transcriber.value,
            voice: voice.value,
            maxOutputTokens: numberOrUndefined($<HTMLInputElement>('#voice-max-tokens')),
            silenceMs: numberOrUndefined($<HTMLInputElement>('#voice-silence')),
            bargeIn: $<HTMLInputElement>('#voice-barge-in').checked,
          }),
        );
        return;
      case 'session.updated':
        if (!s.capture) void startMicrophone(s);
        return;
      case 'input_audio_buffer.speech_started':
        s.speaking = true;
        s.waiting = false;
        if ($<HTMLInputElement>('#voice-barge-in').checked) interrupt(s);
        line(item, 'user').content.textContent = '…';
        return;
      case 'input_audio_buffer.speech_stopped':
        s.speaking = false;
        s.waiting = true;
        return;
      case 'conversation.item.input_audio_transcription.completed':
        line(item, 'user').content.textContent = event.transcript?.trim() || '(nothing heard)';
        return;
      case 'conversation.item.input_audio_transcription.failed': {
        const shown = line(item, 'user');
        shown.node.classList.add('error');
        shown.content.textContent = `transcription failed: ${event.error?.message ?? 'unknown error'}`;
        return;
      }
      case 'response.created':
        s.responding = true;
        s.waiting = false;
        return;
      case 'response.output_audio_transcript.delta':
      case 'response.output_text.delta':
        line(item, 'assistant').content.append(event.delta ?? '');
        return;
      case 'response.output_audio.delta': {
        const bytes = base64ToBytes(event.delta ?? '');
        count('audioBytes', bytes.length);
        if (!s.cut.has(item)) s.player.push(bytes, item);
        return;
      }
      case 'conversation.item.truncated':
        line(item, 'assistant').meta.textContent = `interrupted · heard ${((event.audio_end_ms ?? 0) / 1000).toFixed(1)} s`;
        return;
      case 'response.done':
        s.responding = false;
        return;
      case 'error':
        s.waiting = false;
        fail(s, event.error?.message ?? 'the server reported an error');
        // Refused before the microphone started (a bad setting): nothing to talk to.
        if (!s.capture) s.socket.close(1000);
        return;
    }
  };

  const finish = (s: Live, event: CloseEvent) => {
    window.clearInterval(s.tick);
    void s.capture?.stop();
    void s.player.close();
    if (live === s) live = undefined;
    for (const control of settings) control.disabled = false;
    start.textContent = 'Start';
    start.disabled = false;
    level.value = 0;
    showState();
    if (s.failed) return;
    if (s.stopping || event.code === 1000) setStatus(status, 'stopped');
    else setStatus(status, `closed (${event.code}${event.reason ? `: ${event.reason}` : ''})`, 'error');
  };

  start.addEventListener('click', () => {
    if (live) {
      live.stopping = true;
      start.disabled = true;
      void live.capture?.stop();
      live.player.interrupt();
      live.socket.close(1000);
      return;
    }
    if (!model.value) return setStatus(status, missingModel(['chat']), 'error');
    // Made on the click: a browser lets a page play audio it starts in answer to the user.
    const player = new PcmPlayer(OUTPUT_RATE, { keep: false });
    const socket = openSocket(`/v1/realtime?model=${encodeURIComponent(model.value)}`);
    const s: Live = { socket, player, speaking: false, waiting: false, responding: false, cut: new Set(), stopping: false, failed: false, tick: window.setInterval(showState, 100) };
    live = s;
    panel.dataset.audioBytes = '0';
    panel.dataset.truncated = '0';
    for (const control of settings) control.disabled = true;
    start.textContent = 'Stop';
    meta.textContent = '';
    setStatus(status, 'connecting…', 'busy');
    socket.onmessage = (e) => {
      try {
        handle(s, JSON.parse(String(e.data)) as ServerEvent);
      } catch (error) {
        fail(s, `could not read the server's event: ${errorText(error)}`);
      }
      showState();
    };
    socket.onclose = (e) => finish(s, e);
  });
}
