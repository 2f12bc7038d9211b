/** OCR: POST /v1/ocr with the image; its lines drawn as boxes on the picture, with text and confidence. */
import { bindModelSelect, call, errorText } from './api.js';
import { $, fileDrop, h, loadImage, setStatus } from './dom.js';

interface Line {
  text: string;
  score: number;
  box: Array<[number, number]>;
}

interface OcrResponse {
  text: string;
  lines: Line[];
  image_width: number;
  image_height: number;
  elapsed_ms: number;
}

export function setupOcr(): void {
  const model = $<HTMLSelectElement>('#ocr-model');
  const canvas = $<HTMLCanvasElement>('#ocr-canvas');
  const status = $('#ocr-status');
  const meta = $('#ocr-meta');
  const rows = $('#ocr-lines tbody');
  const copy = $<HTMLButtonElement>('#ocr-copy');
  bindModelSelect(model, ['ocr']);

  let image: HTMLImageElement | undefined;
  let result: OcrResponse | undefined;
  let hot = -1;

  const draw = () => {
    if (!image) return;
    const g = canvas.getContext('2d')!;
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    g.drawImage(image, 0, 0);
    if (!result) return;
    const unit = Math.max(1, Math.max(canvas.width, canvas.height) / 900);
    g.font = `${Math.round(12 * unit)}px system-ui, sans-serif`;
    g.textBaseline = 'bottom';
    result.lines.forEach((line, i) => {
      const color = i === hot ? '#2463d8' : line.score >= 0.8 ? '#1c9c55' : line.score >= 0.5 ? '#d08a00' : '#d0342c';
      g.lineWidth = (i === hot ? 3 : 2) * unit;
      g.strokeStyle = color;
      g.fillStyle = `${color}22`;
      g.beginPath();
      line.box.forEach(([x, y], k) => (k ? g.lineTo(x, y) : g.moveTo(x, y)));
      g.closePath();
      g.fill();
      g.stroke();
      const [x, y] = line.box[0]!;
      const label = `${i + 1} · ${line.score.toFixed(2)}`;
      const width = g.measureText(label).width + 6 * unit;
      g.fillStyle = color;
      g.fillRect(x, y - 16 * unit, width, 16 * unit);
      g.fillStyle = '#fff';
      g.fillText(label, x + 3 * unit, y - 2 * unit);
    });
  };

  const recognise = async (file: File) => {
    const url = URL.createObjectURL(file);
    try {
      image = await loadImage(url);
    } catch (error) {
      return setStatus(status, errorText(error), 'error');
    }
    result = undefined;
    hot = -1;
    rows.replaceChildren();
    $('#ocr-hint').hidden = true;
    canvas.hidden = false;
    draw();
    const form = new FormData();
    form.append('file', file, file.name);
    if (model.value) form.append('model', model.value);
    setStatus(status, 'recognising…', 'busy');
    copy.disabled = true;
    try {
      result = (await (await call('/v1/ocr', { method: 'POST', body: form })).json()) as OcrResponse;
      rows.replaceChildren(
        ...result.lines.map((line, i) => {
          const row = h(
            'tr',
            {},
            h('td.num', { text: String(i + 1) }),
            h('td', { text: line.text }),
            h('td.num', {}, h('span.score', {}, scoreBar(line.score)), line.score.toFixed(3)),
          );
          const highlight = (on: boolean) => {
            hot = on ? i : -1;
            row.classList.toggle('hot', on);
            draw();
          };
          row.addEventListener('mouseenter', () => highlight(true));
          row.addEventListener('mouseleave', () => highlight(false));
          return row;
        }),
      );
      draw();
      meta.textContent = `${result.lines.length} line${result.lines.length === 1 ? '' : 's'} · ${result.image_width}×${result.image_height} · ${result.elapsed_ms} ms`;
      setStatus(status, result.lines.length ? 'done' : 'no text found', 'ok');
      copy.disabled = !result.text;
    } catch (error) {
      setStatus(status, errorText(error), 'error');
    } finally {
      URL.revokeObjectURL(url);
    }
  };

  fileDrop($('#ocr-drop'), $<HTMLInputElement>('#ocr-file'), (file) => void recognise(file));
  copy.addEventListener('click', () => {
    if (result) void navigator.clipboard?.writeText(result.text).then(() => setStatus(status, 'text copied', 'ok'));
  });
}

function scoreBar(score: number): HTMLElement {
  const bar = h('i');
  bar.style.width = `${Math.round(score * 100)}%`;
  return bar;
}
