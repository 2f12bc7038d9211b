import { UnsupportedCodecError } from '../containers/errors.js';
import { mpegChannels } from '../containers/mpeg.js';
import { pcmLayout } from '../containers/pcm-layout.js';
import { openAac } from './aac.js';
import { openFlac } from './flac.js';
import { openMatroska, openOggOpus } from './opus.js';
import { openPcm } from './pcm.js';
import type { PieceDecoder } from './piece.js';
import { openMp3, openOggVorbis } from './wasm.js';

/**
 * The detected format (detectFormat's name) → its PieceDecoder: the adapter
 * in this folder for each format decodeAudio accepts, given what it needs
 * from the container's headers (a PCM layout, an MP3's channel count).
 */

// The codec libraries load on first use of each format (not at server start) and compile their wasm per decoder.
export async function openDecoder(type: string, bytes: Uint8Array): Promise<PieceDecoder> {
  switch (type) {
    case 'wav':
    case 'aiff':
    case 'caf':
      return openPcm(bytes, pcmLayout(bytes, type));
    case 'mp3':
      return openMp3(mpegChannels(bytes));
    case 'flac':
      return openFlac(bytes);
    case 'opus':
      return openOggOpus(bytes);
    case 'vorbis':
      return openOggVorbis();
    case 'webm':
    case 'mkv':
      return openMatroska(bytes);
    case 'm4a':
    case 'aac':
      return openAac();
    case 'ogg':
      throw new UnsupportedCodecError('its first Ogg stream is neither Opus, Vorbis nor FLAC');
    default:
      throw new Error(`no decoder for ${type}`);
  }
}
