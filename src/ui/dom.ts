/** Small DOM helpers shared by the panels. */

export { formatBytes } from './units.js';

export function $<T extends Element = HTMLElement>(selector: string, root: ParentNode = document): T {
  const found = root.querySelector<T>(selector);
  if (!found) throw new Error(`missing element ${selector}`);
  return found;
}

type Child = Node | string | null | undefined | false;

/** `h('div.row', {title: 'x'}, child, …)`: an element with classes, attributes (on* as listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(spec: K | `${K}.${string}`, attrs: Record<string, unknown> = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const [tag, ...classes] = spec.split('.') as [K, ...string[]];
  const node = document.createElement(tag);
  if (classes.length) node.className = classes.join(' ');
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value as EventListener);
    else if (key === 'text') node.textContent = String(value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/** Seconds as m:ss.s */
export function formatTime(seconds: number): string {
  const m = Math.floor(seconds / 60);
  const s = seconds - m * 60;
  return `${m}:${s.toFixed(1).padStart(4, '0')}`;
}

/** A one-line status: plain, busy (spinner), ok or error. */
export function setStatus(el: HTMLElement, text: string, kind: 'idle' | 'busy' | 'ok' | 'error' = 'idle'): void {
  el.textContent = text;
  el.dataset.kind = kind;
}

export function readAsDataUrl(blob: Blob): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result as string);
    reader.onerror = () => reject(reader.error ?? new Error('could not read the file'));
    reader.readAsDataURL(blob);
  });
}

export function loadImage(src: string): Promise<HTMLImageElement> {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error('the browser cannot decode this image'));
    img.src = src;
  });
}

/** Makes `zone` take a file by drop, paste-free click (through `input`), or drag; calls `onFile` with it. */
export function fileDrop(zone: HTMLElement, input: HTMLInputElement, onFile: (file: File) => void): void {
  zone.addEventListener('click', (e) => {
    if ((e.target as HTMLElement).closest('canvas, button, a')) return;
    input.click();
  });
  input.addEventListener('change', () => {
    const file = input.files?.[0];
    if (file) onFile(file);
    input.value = '';
  });
  dropFiles(zone, (files) => onFile(files[0]!));
}

/** Makes `zone` take files dragged onto it (marked with the class `over` meanwhile); calls `onFiles` with them. */
export function dropFiles(zone: HTMLElement, onFiles: (files: File[]) => void): void {
  zone.addEventListener('dragover', (e) => {
    e.preventDefault();
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    const files = [...(e.dataTransfer?.files ?? [])];
    if (files.length) onFiles(files);
  });
}

export function numberOrUndefined(input: HTMLInputElement): number | undefined {
  return input.value.trim() === '' ? undefined : Number(input.value);
}
