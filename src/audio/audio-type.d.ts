/** audio-type ships no types. It reads `buf.buffer` when present, ignoring byteOffset: pass it a view that starts at offset 0. */
declare module 'audio-type' {
  /** The detected format ('wav', 'mp3', 'flac', 'opus', 'oga', 'm4a', 'webm', 'mkv', 'aac', …), or undefined. */
  export default function audioType(buf: Uint8Array | ArrayBuffer): string | undefined;
}
