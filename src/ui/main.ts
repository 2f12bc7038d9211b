/** The playground's shell: navigation, the API key, the server status line; each panel wires itself up. */
import { apiEvents, apiKey, errorText, getJson, refreshModels, setApiKey } from './api.js';
import { $, setStatus } from './dom.js';
import { setupChat } from './chat.js';
import { setupTranscribe } from './transcribe.js';
import { setupSpeech } from './speech.js';
import { setupVoice } from './voice.js';
import { setupImages } from './images.js';
import { setupOcr } from './ocr.js';
import { setupModels } from './models.js';

const PANELS = ['chat', 'transcribe', 'speech', 'voice', 'images', 'ocr', 'models'] as const;

function show(name: string): void {
  const panel = (PANELS as readonly string[]).includes(name) ? name : 'chat';
  for (const section of document.querySelectorAll<HTMLElement>('main > .panel')) section.hidden = section.dataset.panel !== panel;
  for (const link of document.querySelectorAll<HTMLElement>('#nav a')) link.classList.toggle('on', link.dataset.panel === panel);
  document.title = `lserve · ${$(`#nav a[data-panel="${panel}"]`).textContent}`;
  document.dispatchEvent(new CustomEvent('panel-shown', { detail: panel }));
}

function setupKeyDialog(): void {
  const dialog = $<HTMLDialogElement>('#key-dialog');
  const input = $<HTMLInputElement>('#key-input');
  const open = () => {
    if (dialog.open) return;
    input.value = apiKey();
    dialog.showModal();
  };
  $('#key-button').addEventListener('click', open);
  dialog.addEventListener('close', () => {
    if (dialog.returnValue !== 'save') return;
    setApiKey(input.value.trim());
    void connect();
  });
  apiEvents.addEventListener('unauthorized', open);
}

async function connect(): Promise<void> {
  const status = $('#server-status');
  try {
    const models = await refreshModels();
    setStatus(status, `connected · ${models.length} model${models.length === 1 ? '' : 's'}`, 'ok');
  } catch (error) {
    setStatus(status, errorText(error), 'error');
  }
}

async function main(): Promise<void> {
  setupKeyDialog();
  setupChat();
  setupTranscribe();
  setupSpeech();
  setupVoice();
  setupImages();
  setupOcr();
  setupModels();
  window.addEventListener('hashchange', () => show(location.hash.slice(1)));
  show(location.hash.slice(1));
  // /health needs no key: tells "server down" from "key missing".
  try {
    await getJson('/health');
  } catch (error) {
    setStatus($('#server-status'), `server unreachable: ${errorText(error)}`, 'error');
    return;
  }
  await connect();
  document.body.dataset.ready = 'true';
}

void main();
