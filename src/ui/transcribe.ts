/**
 * Speech to text: a file through POST /v1/audio/transcriptions (verbose_json:
 * text and timed segments), or the microphone over the WebSocket
 * /v1/audio/transcriptions/stream (PCM16 16 kHz out, partial and final text in).
 */
import { bindModelSelect, call, errorText, getJson, missingModel, openSocket } from './api.js';
import { captureMicrophone, type Capture } from './audio.js';
import { $, fileDrop, formatBytes, formatTime, h, setStatus } from './dom.js';

interface Segment {
  start: number;
  end: number;
  text: string;
}

interface Verbose {
  text: string;
  language?: string;
  duration?: number;
  segments?: Segment[];
}

export function setupTranscribe(): void {
  const model = $<HTMLSelectElement>('#stt-model');
  const liveModel = $<HTMLSelectElement>('#stt-live-model');
  const language = $<HTMLSelectElement>('#stt-language');
  const run = $<HTMLButtonElement>('#stt-run');
  const status = $('#stt-status');
  const text = $('#stt-text');
  const meta = $('#stt-meta');
  const rows = $('#stt-segments tbody');
  bindModelSelect(model, ['asr']);
  bindModelSelect(liveModel, ['asr-stream']);

  model.addEventListener('change', async () => {
    const keep = language.value;
    language.replaceChildren(new Option('auto', ''));
    if (!model.value) return;
    try {
      const info = await getJson<{ asr_supported_languages?: string[] }>(`/v1/audio/info?model=${encodeURIComponent(model.value)}`);
      for (const code of info.asr_supported_languages ?? []) language.append(new Option(code, code));
      language.value = keep;
      if (language.value !== keep) language.value = '';
    } catch {
      // the picker keeps "auto"
    }
  });

  const showSegments = (segments: Segment[]) => {
    rows.replaceChildren(...segments.map((s) => h('tr', {}, h('td.num', { text: formatTime(s.start) }), h('td.num', { text: formatTime(s.end) }), h('td', { text: s.text.trim() }))));
  };

  // ─── a file ───
  let file: File | undefined;
  fileDrop($('#stt-drop'), $<HTMLInputElement>('#stt-file'), (chosen) => {
    file = chosen;
    $('#stt-file-name').textContent = `${chosen.name} · ${formatBytes(chosen.size)}`;
    run.disabled = false;
  });
  run.addEventListener('click', async () => {
    if (!file) return;
    const form = new FormData();
    form.append('file', file, file.name);
    if (model.value) form.append('model', model.value);
    form.append('response_format', 'verbose_json');
    if (language.value) form.append('language', language.value);
    const prompt = $<HTMLTextAreaElement>('#stt-prompt').value.trim();
    if (prompt) form.append('prompt', prompt);
    run.disabled = true;
    setStatus(status, 'transcribing…', 'busy');
    const started = performance.now();
    try {
      const result = (await (await call('/v1/audio/transcriptions', { method: 'POST', body: form })).json()) as Verbose;
      text.textContent = result.text.trim() || '(no speech)';
      showSegments(result.segments ?? []);
      const seconds = (performance.now() - started) / 1000;
      meta.textContent = [result.language, result.duration !== undefined ? `${result.duration.toFixed(1)} s of audio` : '', `${seconds.toFixed(1)} s`].filter(Boolean).join(' · ');
      setStatus(status, 'done', 'ok');
    } catch (error) {
      setStatus(status, errorText(error), 'error');
    } finally {
      run.disabled = false;
    }
  });

  // ─── the microphone ───
  const mic = $<HTMLButtonElement>('#stt-mic');
  const level = $<HTMLProgressElement>('#stt-level');
  const liveStatus = $('#stt-live-status');
  const partial = $('#stt-partial');
  interface Live {
    socket: WebSocket;
    capture?: Capture;
    started: number;
    finals: Segment[];
    /** When the current utterance began (seconds since start). */
    from: number;
  }
  let live: Live | undefined;

  const stopLive = async () => {
    if (!live) return;
    const session = live;
    mic.disabled = true;
    setStatus(liveStatus, 'finishing…', 'busy');
    await session.capture?.stop();
    level.value = 0;
    if (session.socket.readyState === WebSocket.OPEN) session.socket.send(JSON.stringify({ type: 'end' }));
  };

  mic.addEventListener('click', async () => {
    if (live) return void stopLive();
    if (!liveModel.value) return setStatus(liveStatus, missingModel(['asr-stream']), 'error');
    text.textContent = '';
    rows.replaceChildren();
    partial.textContent = '';
    meta.textContent = `live · ${liveModel.value}`;
    const socket = openSocket(`/v1/audio/transcriptions/stream?model=${encodeURIComponent(liveModel.value)}`);
    socket.binaryType = 'arraybuffer';
    const session: Live = { socket, started: performance.now(), finals: [], from: 0 };
    live = session;
    mic.textContent = 'Stop';
    setStatus(liveStatus, 'connecting…', 'busy');
    let failed = false;
    socket.onmessage = (e) => {
      const message = JSON.parse(String(e.data)) as { text?: string; is_final?: boolean; error?: { message: string } };
      if (message.error) {
        failed = true;
        setStatus(liveStatus, message.error.message, 'error');
        return;
      }
      const now = (performance.now() - session.started) / 1000;
      if (message.is_final) {
        partial.textContent = '';
        if (message.text?.trim()) {
          session.finals.push({ start: session.from, end: now, text: message.text });
          text.textContent = session.finals.map((s) => s.text.trim()).join(' ');
          showSegments(session.finals);
        }
        session.from = now;
      } else {
        partial.textContent = message.text ?? '';
      }
    };
    socket.onclose = (e) => {
      void session.capture?.stop();
      if (live === session) live = undefined;
      mic.textContent = 'Start';
      mic.disabled = false;
      level.value = 0;
      partial.textContent = '';
      if (!failed) setStatus(liveStatus, e.code === 1000 ? `done · ${session.finals.length} segment${session.finals.length === 1 ? '' : 's'}` : `closed (${e.code}${e.reason ? `: ${e.reason}` : ''})`, e.code === 1000 ? 'ok' : 'error');
    };
    socket.onopen = async () => {
      try {
        session.capture = await captureMicrophone((pcm, rms) => {
          level.value = Math.min(1, rms * 4);
          if (socket.readyState === WebSocket.OPEN) socket.send(pcm.buffer);
        });
        if (live !== session) return void session.capture.stop();
        session.started = performance.now();
        setStatus(liveStatus, 'listening…', 'busy');
      } catch (error) {
        failed = true;
        setStatus(liveStatus, `microphone: ${errorText(error)}`, 'error');
        socket.close();
      }
    };
  });
}
