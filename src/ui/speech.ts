/**
 * Text to speech: POST /v1/audio/speech with `stream: true` and
 * `response_format: "pcm"`, then GET its stream_url and play the PCM as it
 * arrives. Voices from GET /v1/audio/info: preset speakers, a described voice
 * (design) or a reference recording (clone: uploaded or recorded here).
 */
import { bindModelSelect, call, errorText, getJson } from './api.js';
import { captureMicrophone, PcmPlayer, wavBlob, type Capture } from './audio.js';
import { $, formatBytes, numberOrUndefined, readAsDataUrl, setStatus } from './dom.js';

interface AudioInfo {
  tts_supported_languages?: string[];
  supported_speakers?: string[];
  voice_mode?: 'preset' | 'design' | 'clone';
}

export function setupSpeech(): void {
  const model = $<HTMLSelectElement>('#tts-model');
  const voice = $<HTMLSelectElement>('#tts-voice');
  const language = $<HTMLSelectElement>('#tts-language');
  const modeBadge = $('#tts-mode');
  const speak = $<HTMLButtonElement>('#tts-speak');
  const stop = $<HTMLButtonElement>('#tts-stop');
  const status = $('#tts-status');
  const meta = $('#tts-meta');
  const progress = $<HTMLProgressElement>('#tts-progress');
  const audio = $<HTMLAudioElement>('#tts-audio');
  const download = $<HTMLAnchorElement>('#tts-download');
  const refName = $('#tts-ref-name');
  const refAudio = $<HTMLAudioElement>('#tts-ref-audio');
  bindModelSelect(model, ['tts']);

  let mode: AudioInfo['voice_mode'] = 'preset';
  let reference: Blob | undefined;

  model.addEventListener('change', async () => {
    voice.replaceChildren();
    language.replaceChildren(new Option('auto', ''));
    if (!model.value) return;
    try {
      const info = await getJson<AudioInfo>(`/v1/audio/info?model=${encodeURIComponent(model.value)}`);
      mode = info.voice_mode ?? 'preset';
      const speakers = info.supported_speakers ?? [];
      voice.replaceChildren(...(speakers.length ? speakers.map((s) => new Option(s, s)) : [new Option('default', '')]));
      for (const name of info.tts_supported_languages ?? []) language.append(new Option(name, name));
    } catch (error) {
      mode = 'preset';
      setStatus(status, errorText(error), 'error');
    }
    modeBadge.textContent = { preset: 'preset voices', design: 'voice design', clone: 'voice clone' }[mode];
    $('#tts-preset').hidden = mode !== 'preset';
    $('#tts-design').hidden = mode !== 'design';
    $('#tts-clone').hidden = mode !== 'clone';
  });

  // ─── the reference voice (clone) ───
  const setReference = (blob: Blob, name: string) => {
    reference = blob;
    refName.textContent = name;
    refAudio.src = URL.createObjectURL(blob);
    refAudio.hidden = false;
  };
  const refFile = $<HTMLInputElement>('#tts-ref-file');
  $('#tts-ref-pick').addEventListener('click', () => refFile.click());
  refFile.addEventListener('change', () => {
    const file = refFile.files?.[0];
    if (file) setReference(file, `${file.name} · ${formatBytes(file.size)}`);
    refFile.value = '';
  });
  const record = $<HTMLButtonElement>('#tts-ref-record');
  let recording: { capture: Capture; chunks: Int16Array[]; started: number } | undefined;
  record.addEventListener('click', async () => {
    if (recording) {
      const { capture, chunks, started } = recording;
      recording = undefined;
      await capture.stop();
      record.textContent = 'Record';
      setReference(wavBlob(chunks, capture.sampleRate), `recording · ${((performance.now() - started) / 1000).toFixed(1)} s`);
      return;
    }
    try {
      const chunks: Int16Array[] = [];
      const capture = await captureMicrophone((pcm) => chunks.push(pcm));
      recording = { capture, chunks, started: performance.now() };
      record.textContent = 'Stop recording';
      refName.textContent = 'recording…';
    } catch (error) {
      setStatus(status, `microphone: ${errorText(error)}`, 'error');
    }
  });

  // ─── speaking ───
  interface Running {
    abort: AbortController;
    player?: PcmPlayer;
  }
  let running: Running | undefined;
  stop.addEventListener('click', () => {
    running?.abort.abort();
    void running?.player?.close();
  });

  speak.addEventListener('click', async () => {
    const input = $<HTMLTextAreaElement>('#tts-input').value.trim();
    if (!input || running) return;
    const body: Record<string, unknown> = {
      model: model.value || undefined,
      input,
      stream: true,
      response_format: 'pcm',
      language: language.value || undefined,
      speed: numberOrUndefined($<HTMLInputElement>('#tts-speed')),
      seed: numberOrUndefined($<HTMLInputElement>('#tts-seed')),
    };
    if (mode === 'preset' && voice.value) body.voice = voice.value;
    if (mode === 'design') body.instructions = $<HTMLTextAreaElement>('#tts-instructions').value.trim();
    if (mode === 'clone') {
      if (!reference) return setStatus(status, 'choose or record a reference voice first', 'error');
      body.ref_audio = await readAsDataUrl(reference);
      const refText = $<HTMLTextAreaElement>('#tts-ref-text').value.trim();
      if (refText) body.ref_text = refText;
    }
    const session: Running = { abort: new AbortController() };
    running = session;
    speak.disabled = true;
    stop.disabled = false;
    audio.hidden = true;
    download.hidden = true;
    progress.removeAttribute('value');
    meta.textContent = '';
    setStatus(status, 'preparing…', 'busy');
    const started = performance.now();
    let tick: number | undefined;
    let first: number | undefined;
    const showTime = (player: PcmPlayer) => {
      progress.max = Math.max(player.seconds, 0.001);
      progress.value = player.played;
      meta.textContent = `${player.played.toFixed(1)} / ${player.seconds.toFixed(1)} s · ${player.sampleRate} Hz${first !== undefined ? ` · first audio after ${first} ms` : ''}`;
    };
    try {
      const job = (await (await call('/v1/audio/speech', { method: 'POST', json: body, signal: session.abort.signal })).json()) as { stream_url: string };
      const res = await call(job.stream_url, { signal: session.abort.signal });
      const rate = Number(res.headers.get('x-sample-rate')) || 24_000;
      const player = new PcmPlayer(rate);
      session.player = player;
      tick = window.setInterval(() => showTime(player), 100);
      const reader = res.body!.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        if (first === undefined) {
          first = Math.round(performance.now() - started);
          setStatus(status, 'playing while it streams…', 'busy');
          $('#panel-speech').dataset.playing = 'true';
        }
        player.push(value);
      }
      $('#panel-speech').dataset.received = player.seconds.toFixed(2);
      const wav = player.wav();
      audio.src = download.href = URL.createObjectURL(wav);
      audio.hidden = false;
      download.hidden = false;
      setStatus(status, `streamed ${player.seconds.toFixed(1)} s at ${rate} Hz · playing`, 'busy');
      await player.drained();
      if (session.abort.signal.aborted) throw new DOMException('stopped', 'AbortError');
      setStatus(status, `played ${player.seconds.toFixed(1)} s`, 'ok');
      $('#panel-speech').dataset.played = player.seconds.toFixed(2);
    } catch (error) {
      setStatus(status, session.abort.signal.aborted ? 'stopped' : errorText(error), session.abort.signal.aborted ? 'idle' : 'error');
    } finally {
      if (tick !== undefined) window.clearInterval(tick);
      if (session.player) {
        showTime(session.player);
        await session.player.close().catch(() => {});
      } else progress.value = 0;
      delete $('#panel-speech').dataset.playing;
      running = undefined;
      speak.disabled = false;
      stop.disabled = true;
    }
  });
}
