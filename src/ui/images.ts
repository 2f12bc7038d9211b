/**
 * Images: generate (POST /v1/images/generations), image to image
 * (/v1/images/img2img) and edit with a mask painted here (/v1/images/edits),
 * each with `stream: true` so progress shows step by step.
 */
import { bindModelSelect, call, errorText, installedModels, modelEvents, readSse } from './api.js';
import { $, fileDrop, h, loadImage, numberOrUndefined, setStatus } from './dom.js';

type Mode = 'generate' | 'img2img' | 'edit';

interface StreamEvent {
  type: string;
  image?: number;
  images?: number;
  step?: number;
  steps?: number;
  b64_json?: string;
  size?: string;
  seed?: number;
  output_format?: string;
  revised_prompt?: string;
  error?: { message: string };
}

const SIZES = ['512x512', '768x768', '512x768', '768x512', '384x384', '256x256', '128x128', '64x64'];

export function setupImages(): void {
  const panel = $('#panel-images');
  const model = $<HTMLSelectElement>('#img-model');
  const vae = $<HTMLSelectElement>('#img-vae');
  const size = $<HTMLSelectElement>('#img-size');
  const run = $<HTMLButtonElement>('#img-run');
  const stop = $<HTMLButtonElement>('#img-stop');
  const status = $('#img-status');
  const progress = $<HTMLProgressElement>('#img-progress');
  const results = $('#img-results');
  const source = $<HTMLCanvasElement>('#img-source');
  const mask = $<HTMLCanvasElement>('#img-mask');
  const brush = $<HTMLInputElement>('#img-brush');
  bindModelSelect(model, ['image']);
  size.replaceChildren(new Option('default', ''), ...SIZES.map((s) => new Option(s, s)));

  const fillVae = () => {
    const keep = vae.value;
    vae.replaceChildren(new Option("model's own VAE", ''), ...installedModels().filter((m) => m.kind === 'image' && m.id !== model.value).map((m) => new Option(m.id, m.id)));
    vae.value = keep;
    if (vae.value !== keep) vae.value = '';
  };
  modelEvents.addEventListener('change', fillVae);
  model.addEventListener('change', fillVae);

  // ─── mode ───
  let mode: Mode = 'generate';
  const setMode = (next: Mode) => {
    mode = next;
    for (const b of document.querySelectorAll<HTMLButtonElement>('#img-mode button')) b.classList.toggle('on', b.dataset.mode === mode);
    $('#img-source-box').hidden = mode === 'generate';
    for (const el of panel.querySelectorAll<HTMLElement>('.for-img2img')) el.hidden = mode !== 'img2img';
    for (const el of panel.querySelectorAll<HTMLElement>('.for-edit')) el.hidden = mode !== 'edit';
    mask.hidden = mode !== 'edit';
    run.textContent = { generate: 'Generate', img2img: 'Transform', edit: 'Repaint' }[mode];
  };
  for (const b of document.querySelectorAll<HTMLButtonElement>('#img-mode button')) b.addEventListener('click', () => setMode(b.dataset.mode as Mode));

  // ─── the source image and its mask ───
  let hasSource = false;
  let painted = false;
  const setSource = async (url: string) => {
    const img = await loadImage(url);
    source.width = mask.width = img.naturalWidth;
    source.height = mask.height = img.naturalHeight;
    source.getContext('2d')!.drawImage(img, 0, 0);
    mask.getContext('2d')!.clearRect(0, 0, mask.width, mask.height);
    painted = false;
    hasSource = true;
    $('#img-stage').hidden = false;
    $('#img-drop-hint').hidden = true;
  };
  fileDrop($('#img-drop'), $<HTMLInputElement>('#img-file'), (file) => {
    const url = URL.createObjectURL(file);
    setSource(url)
      .catch((error: unknown) => setStatus(status, errorText(error), 'error'))
      .finally(() => URL.revokeObjectURL(url));
  });

  const paint = mask.getContext('2d')!;
  let last: { x: number; y: number } | undefined;
  const point = (e: PointerEvent) => {
    const rect = mask.getBoundingClientRect();
    const scale = mask.width / rect.width;
    return { x: (e.clientX - rect.left) * scale, y: (e.clientY - rect.top) * scale, scale };
  };
  const stroke = (e: PointerEvent) => {
    const p = point(e);
    paint.strokeStyle = paint.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--mask').trim() || '#ff3b30';
    paint.lineWidth = Number(brush.value) * p.scale;
    paint.lineCap = paint.lineJoin = 'round';
    paint.beginPath();
    paint.moveTo((last ?? p).x, (last ?? p).y);
    paint.lineTo(p.x + 0.01, p.y);
    paint.stroke();
    last = p;
    painted = true;
  };
  mask.addEventListener('pointerdown', (e) => {
    if (mode !== 'edit') return;
    mask.setPointerCapture(e.pointerId);
    last = undefined;
    stroke(e);
  });
  mask.addEventListener('pointermove', (e) => {
    if (last && mask.hasPointerCapture(e.pointerId)) stroke(e);
  });
  const lift = () => (last = undefined);
  mask.addEventListener('pointerup', lift);
  mask.addEventListener('pointercancel', lift);
  $('#img-mask-clear').addEventListener('click', () => {
    paint.clearRect(0, 0, mask.width, mask.height);
    painted = false;
  });
  $('#img-mask-all').addEventListener('click', () => {
    paint.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--mask').trim() || '#ff3b30';
    paint.fillRect(0, 0, mask.width, mask.height);
    painted = true;
  });

  const png = (canvas: HTMLCanvasElement) =>
    new Promise<Blob>((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new Error('could not encode the image'))), 'image/png'));

  /** OpenAI's mask: same size as the image, transparent where to repaint, opaque elsewhere. */
  const maskPng = () => {
    const out = document.createElement('canvas');
    out.width = mask.width;
    out.height = mask.height;
    const g = out.getContext('2d')!;
    g.fillStyle = '#000';
    g.fillRect(0, 0, out.width, out.height);
    g.globalCompositeOperation = 'destination-out';
    g.drawImage(mask, 0, 0);
    return png(out);
  };

  // ─── results ───
  const addResult = (event: StreamEvent) => {
    results.querySelector('.empty')?.remove();
    const format = event.output_format ?? 'png';
    const url = `data:image/${format === 'jpg' ? 'jpeg' : format};base64,${event.b64_json}`;
    const use = h('button', { type: 'button', text: 'Use as source', title: 'start image to image or an edit from this picture' });
    use.addEventListener('click', () => {
      if (mode === 'generate') setMode('img2img');
      void setSource(url);
    });
    const figure = h(
      'figure',
      {},
      h('img', { src: url, alt: event.revised_prompt ?? 'generated image', title: event.revised_prompt ? `prompt read as: ${event.revised_prompt}` : undefined }),
      h('figcaption', {}, h('span', { text: `${event.size ?? ''}${event.seed !== undefined ? ` · seed ${event.seed}` : ''}` }), h('span.grow'), h('a', { href: url, download: `lserve-${event.seed ?? 'image'}.${format}`, text: 'Save' }), use),
    );
    results.prepend(figure);
  };

  let running: AbortController | undefined;
  stop.addEventListener('click', () => running?.abort());

  run.addEventListener('click', async () => {
    if (running) return;
    const prompt = $<HTMLTextAreaElement>('#img-prompt').value.trim();
    if (!prompt) return setStatus(status, 'write a prompt first', 'error');
    if (mode !== 'generate' && !hasSource) return setStatus(status, 'choose a source image first', 'error');
    if (mode === 'edit' && !painted) return setStatus(status, 'paint the part of the image to repaint', 'error');
    const fields: Record<string, string | number | boolean | undefined> = {
      model: model.value || undefined,
      prompt,
      negative_prompt: $<HTMLTextAreaElement>('#img-negative').value.trim() || undefined,
      size: size.value || undefined,
      n: numberOrUndefined($<HTMLInputElement>('#img-n')),
      steps: numberOrUndefined($<HTMLInputElement>('#img-steps')),
      seed: numberOrUndefined($<HTMLInputElement>('#img-seed')),
      guidance_scale: numberOrUndefined($<HTMLInputElement>('#img-guidance')),
      strength: mode === 'img2img' ? numberOrUndefined($<HTMLInputElement>('#img-strength')) : undefined,
      vae: vae.value || undefined,
      response_format: 'b64_json',
      stream: true,
    };
    running = new AbortController();
    run.disabled = true;
    stop.disabled = false;
    progress.value = 0;
    setStatus(status, 'waiting for the model…', 'busy');
    const started = performance.now();
    let made = 0;
    try {
      let res: Response;
      if (mode === 'generate') {
        res = await call('/v1/images/generations', { method: 'POST', json: fields, signal: running.signal });
      } else {
        const form = new FormData();
        for (const [key, value] of Object.entries(fields)) if (value !== undefined) form.append(key, String(value));
        form.append('image', await png(source), 'image.png');
        if (mode === 'edit') form.append('mask', await maskPng(), 'mask.png');
        res = await call(mode === 'edit' ? '/v1/images/edits' : '/v1/images/img2img', { method: 'POST', body: form, signal: running.signal });
      }
      for await (const message of readSse(res)) {
        const event = JSON.parse(message.data) as StreamEvent;
        if (event.type === 'error') throw new Error(event.error?.message ?? 'generation failed');
        if (event.type.endsWith('.progress')) {
          const steps = Math.max(1, event.steps ?? 1);
          progress.max = (event.images ?? 1) * steps;
          progress.value = (event.image ?? 0) * steps + (event.step ?? 0);
          setStatus(status, `image ${(event.image ?? 0) + 1}/${event.images} · step ${event.step}/${event.steps}${event.step === event.steps ? ' · decoding' : ''}`, 'busy');
        } else if (event.type.endsWith('.completed')) {
          made++;
          addResult(event);
        }
      }
      progress.value = progress.max;
      setStatus(status, `${made} image${made === 1 ? '' : 's'} in ${((performance.now() - started) / 1000).toFixed(1)} s`, 'ok');
    } catch (error) {
      setStatus(status, running.signal.aborted ? 'stopped' : errorText(error), running.signal.aborted ? 'idle' : 'error');
    } finally {
      running = undefined;
      run.disabled = false;
      stop.disabled = true;
    }
  });

  setMode('generate');
}
