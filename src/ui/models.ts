/**
 * Models: installed and catalog models (GET /v1/catalog) with size and
 * status; pull with live progress (POST /v1/models/pull, an SSE stream),
 * remove (DELETE /v1/models/{id}).
 */
import { call, errorText, getJson, readSse, refreshModels } from './api.js';
import { $, formatBytes, h, setStatus } from './dom.js';

interface CatalogModel {
  id: string;
  kind: string;
  backend: string;
  source: string;
  size_bytes: number | null;
  size_exact: boolean;
  installed: boolean;
  status: string;
  partial_bytes?: number;
  loaded: boolean;
  aliases: string[];
  description: string;
  license: string;
}

interface PullEvent {
  type: string;
  file?: string;
  files?: unknown[];
  total_bytes?: number | null;
  received_bytes?: number;
  completed_bytes?: number;
  model_total_bytes?: number | null;
  message?: string;
  pid?: number;
  error?: { message: string };
}

/** A running pull: its progress widget lives across re-renders of the table. */
interface Pull {
  abort: AbortController;
  node: HTMLElement;
  bar: HTMLProgressElement;
  text: HTMLElement;
}

export function setupModels(): void {
  const table = $('#models-table tbody');
  const filter = $<HTMLInputElement>('#models-filter');
  const kind = $<HTMLSelectElement>('#models-kind');
  const installedOnly = $<HTMLInputElement>('#models-installed');
  const summary = $('#models-summary');
  let rows: CatalogModel[] = [];
  const pulls = new Map<string, Pull>();
  const notes = new Map<string, { text: string; kind: 'ok' | 'error' }>();

  const render = () => {
    const words = filter.value.trim().toLowerCase();
    const shown = rows.filter(
      (m) =>
        (!kind.value || m.kind === kind.value) &&
        (!installedOnly.checked || m.installed) &&
        (!words || [m.id, ...m.aliases, m.description].some((s) => s.toLowerCase().includes(words))),
    );
    table.replaceChildren(...shown.map(row));
    const installed = rows.filter((m) => m.installed);
    summary.textContent = `${installed.length} installed · ${formatBytes(installed.reduce((n, m) => n + (m.size_bytes ?? 0), 0))} · ${rows.length} known`;
  };

  const row = (m: CatalogModel): HTMLElement => {
    const pull = pulls.get(m.id);
    const status = pull ? 'pulling' : m.status;
    const total = `${m.size_exact ? '' : '~'}${formatBytes(m.size_bytes)}`;
    const size = m.status === 'partial' && m.partial_bytes ? `${formatBytes(m.partial_bytes)} of ${total}` : total;
    const actions = h('td.actions');
    const note = notes.get(m.id);
    if (pull) {
      actions.append(pull.node);
    } else {
      if (note) actions.append(h('span.status', { 'data-kind': note.kind, text: note.text }), ' ');
      if (!m.installed && m.source === 'catalog') actions.append(h('button', { type: 'button', text: m.status === 'partial' ? 'Resume' : 'Pull', onclick: () => startPull(m.id) }));
      if (m.installed && m.source !== 'bundled') actions.append(removeButton(m));
    }
    return h(
      'tr',
      { 'data-model': m.id, title: m.description },
      h('td', {}, h('b', { text: m.id }), m.aliases.length ? h('div.aliases', { text: m.aliases.join(', ') }) : null),
      h('td', { text: m.kind }),
      h('td', { text: m.backend }),
      h('td.num', { text: size }),
      h('td', { text: m.license }),
      h('td', {}, badge(status), m.loaded ? h('span.muted', { text: ' · loaded' }) : null),
      actions,
    );
  };

  const removeButton = (m: CatalogModel) => {
    const button = h('button.danger', { type: 'button', text: m.source === 'local' ? 'Unregister' : 'Remove' });
    let timer: number | undefined;
    button.addEventListener('click', async () => {
      if (!button.classList.contains('armed')) {
        button.classList.add('armed');
        button.textContent = 'Confirm';
        timer = window.setTimeout(() => {
          button.classList.remove('armed');
          button.textContent = m.source === 'local' ? 'Unregister' : 'Remove';
        }, 4000);
        return;
      }
      window.clearTimeout(timer);
      button.disabled = true;
      try {
        await call(`/v1/models/${encodeURIComponent(m.id)}`, { method: 'DELETE' });
        notes.set(m.id, { text: 'removed', kind: 'ok' });
      } catch (error) {
        notes.set(m.id, { text: errorText(error), kind: 'error' });
      }
      await reload();
      await refreshModels().catch(() => {});
    });
    return button;
  };

  const startPull = async (id: string) => {
    if (pulls.has(id)) return;
    notes.delete(id);
    const bar = h('progress', { max: 1 });
    const text = h('span', { text: 'starting…' });
    const cancel = h('button', { type: 'button', text: 'Cancel' });
    const node = h('div.pull', {}, h('div.row', {}, bar, cancel), text);
    const pull: Pull = { abort: new AbortController(), node, bar, text };
    cancel.addEventListener('click', () => pull.abort.abort());
    pulls.set(id, pull);
    render();
    const started = performance.now();
    let total: number | null = null;
    let done = false;
    try {
      const res = await call('/v1/models/pull', { method: 'POST', json: { model: id }, signal: pull.abort.signal });
      for await (const message of readSse(res)) {
        const event = JSON.parse(message.data) as PullEvent;
        switch (event.type) {
          case 'start':
            total = event.total_bytes ?? null;
            text.textContent = `0 B${total ? ` / ${formatBytes(total)}` : ''}`;
            break;
          case 'waiting':
            text.textContent = `waiting for another pull (pid ${event.pid})…`;
            break;
          case 'progress': {
            const doneBytes = event.completed_bytes ?? 0;
            total = event.model_total_bytes ?? total;
            const of = total ?? event.total_bytes ?? null;
            if (of) {
              bar.max = of;
              bar.value = Math.min(doneBytes, of);
            }
            const seconds = (performance.now() - started) / 1000;
            text.textContent = `${formatBytes(doneBytes)}${of ? ` / ${formatBytes(of)}` : ''} · ${formatBytes(doneBytes / Math.max(seconds, 0.001))}/s · ${event.file}`;
            node.dataset.progress = of ? (doneBytes / of).toFixed(3) : '';
            break;
          }
          case 'retry':
            text.textContent = `retrying ${event.file}: ${event.message}`;
            break;
          case 'prepare':
            bar.removeAttribute('value');
            text.textContent = event.message ?? 'preparing…';
            break;
          case 'done':
            done = true;
            bar.value = bar.max;
            notes.set(id, { text: 'pulled', kind: 'ok' });
            break;
          case 'error':
            throw new Error(event.error?.message ?? 'the pull failed');
        }
      }
      if (!done) throw new Error('the stream ended before the pull did');
    } catch (error) {
      notes.set(id, { text: pull.abort.signal.aborted ? 'cancelled (partial kept)' : errorText(error), kind: pull.abort.signal.aborted ? 'ok' : 'error' });
    } finally {
      pulls.delete(id);
      await reload();
      await refreshModels().catch(() => {});
    }
  };

  const reload = async () => {
    try {
      rows = (await getJson<{ data: CatalogModel[] }>('/v1/catalog')).data;
      const kinds = [...new Set(rows.map((m) => m.kind))].sort();
      const keep = kind.value;
      kind.replaceChildren(new Option('all kinds', ''), ...kinds.map((k) => new Option(k, k)));
      kind.value = keep;
      render();
    } catch (error) {
      setStatus(summary, errorText(error), 'error');
    }
  };

  filter.addEventListener('input', render);
  kind.addEventListener('change', render);
  installedOnly.addEventListener('change', render);
  $('#models-refresh').addEventListener('click', () => void reload().then(() => refreshModels()));
  document.addEventListener('panel-shown', (e) => {
    if ((e as CustomEvent<string>).detail === 'models') void reload();
  });
}

function badge(status: string): HTMLElement {
  const node = h('span.badge', { text: status });
  node.classList.add(status.replace(/\s+/g, '-'));
  return node;
}
