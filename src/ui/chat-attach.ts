/**
 * The chat panel's attach control: images and audio clips for the next user
 * message, picked (#chat-attach), pasted into the message box, or dropped
 * onto the chat; shown in a tray above the box, each with a remove button.
 * Offered only for a model whose /v1/models entry lists them in
 * input_modalities; what a request could not carry is refused here, with the
 * server's numbers (chat-media.ts).
 */
import { installedModels, modelEvents, errorText } from './api.js';
import { audioSeconds } from './audio.js';
import { attachmentProblem, mediaTypeOf, type Api, type Attachment } from './chat-media.js';
import { $, dropFiles, formatTime, h, loadImage, readAsDataUrl, setStatus } from './dom.js';

export interface Attachments {
  /** How many wait for the next message. */
  readonly pending: number;
  /** Why the next request, carrying the conversation's and the pending ones, would be refused; or undefined. */
  problem(): string | undefined;
  /** Hands the pending ones over to a message; the tray empties. */
  take(): Attachment[];
  /** Drops the pending ones and lets go of the conversation's (before it is cleared). */
  clear(): void;
}

/** `earlier`: the attachments of the conversation so far, which every request resends. */
export function setupAttachments(model: HTMLSelectElement, api: () => Api, earlier: () => readonly Attachment[], status: HTMLElement): Attachments {
  const attach = $<HTMLButtonElement>('#chat-attach');
  const picker = $<HTMLInputElement>('#chat-file');
  const tray = $('#chat-attachments');
  let pending: Attachment[] = [];
  const inputs = () => installedModels().find((m) => m.id === model.value)?.architecture?.input_modalities ?? ['text'];
  const problem = (more: readonly Attachment[] = []) => attachmentProblem(model.value, inputs(), [...earlier(), ...pending, ...more], api());
  const release = (attachments: readonly Attachment[]) => attachments.forEach((a) => a.url.startsWith('blob:') && URL.revokeObjectURL(a.url));

  const offer = () => {
    const takes = inputs().filter((k) => k !== 'text');
    attach.disabled = takes.length === 0;
    // On a wrapper: not every browser shows a disabled button's tooltip.
    $('#chat-attach-tip').title = takes.length ? `Attach ${takes.join(' or ')} (or paste, or drop onto the chat)` : `${model.value || 'This model'} takes text only`;
    picker.accept = [takes.includes('image') ? 'image/*' : '', takes.includes('audio') ? 'audio/wav,audio/mpeg,.wav,.mp3' : ''].filter(Boolean).join(',');
  };
  model.addEventListener('change', offer);
  modelEvents.addEventListener('change', offer);
  offer();

  const show = () => {
    tray.replaceChildren(
      ...pending.map((a) =>
        h(
          'span.attachment',
          { title: a.name },
          a.kind === 'image' ? h('img', { src: a.url, alt: a.name }) : h('span', { text: `♪ ${a.name}${a.seconds === undefined ? '' : ` · ${formatTime(a.seconds)}`}` }),
          h('button', { type: 'button', text: '×', 'aria-label': `remove ${a.name}`, onclick: () => remove(a) }),
        ),
      ),
    );
    tray.hidden = pending.length === 0;
  };
  const remove = (a: Attachment) => {
    pending = pending.filter((p) => p !== a);
    release([a]);
    show();
  };

  const read = async (file: File): Promise<Attachment> => {
    const type = mediaTypeOf(file.type, file.name);
    if (!type) throw new Error(`${file.name || 'That file'} is neither an image nor a WAV or MP3 clip.`);
    const dataUrl = await readAsDataUrl(file);
    const name = file.name || `pasted ${type.kind}`;
    if (type.kind === 'image') {
      const img = await loadImage(dataUrl);
      return { ...type, name, dataUrl, url: dataUrl, pixels: img.naturalWidth * img.naturalHeight };
    }
    const url = URL.createObjectURL(file);
    return { ...type, name, dataUrl, url, seconds: await audioSeconds(url) };
  };

  /** One by one: the first file that cannot go stops there, saying why. */
  const add = async (files: readonly File[]) => {
    try {
      for (const file of files) {
        const attachment = await read(file);
        const refused = problem([attachment]);
        if (refused) {
          release([attachment]);
          throw new Error(refused);
        }
        pending.push(attachment);
        show();
      }
      setStatus(status, '');
    } catch (error) {
      setStatus(status, errorText(error), 'error');
    }
  };

  attach.addEventListener('click', () => picker.click());
  picker.addEventListener('change', () => {
    void add([...(picker.files ?? [])]);
    picker.value = '';
  });
  dropFiles($('#panel-chat .work.chat'), (files) => void add(files));
  $('#chat-input').addEventListener('paste', (e) => {
    // With a text-only model the paste stays the text box's (a copied picture often comes with its text).
    const files = [...(e.clipboardData?.files ?? [])];
    if (!files.length || attach.disabled) return;
    e.preventDefault();
    void add(files);
  });

  return {
    get pending() {
      return pending.length;
    },
    problem: () => problem(),
    take() {
      const taken = pending;
      pending = [];
      show();
      return taken;
    },
    clear() {
      release([...earlier(), ...pending]);
      pending = [];
      show();
    },
  };
}

/** A message's media in its bubble: the pictures, and a player for each clip. */
export function mediaView(attachments: readonly Attachment[]): HTMLElement | null {
  if (!attachments.length) return null;
  return h('div.attachments', {}, ...attachments.map((a) => (a.kind === 'image' ? h('img', { src: a.url, alt: a.name, title: a.name }) : h('audio', { src: a.url, controls: true, title: a.name }))));
}
