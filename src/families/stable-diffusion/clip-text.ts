import { DecodingMode, decodeHTML } from 'entities';

/**
 * CLIP's prompt cleaning, as its reference tokenizer (OpenAI CLIP's
 * simple_tokenizer, kept by open_clip) does it before BPE:
 *
 *   whitespace_clean(basic_clean(text)).lower()
 *   basic_clean(text)      = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
 *   whitespace_clean(text) = re.sub(r"\s+", " ", text).strip()
 *
 * ftfy.fix_text is followed in every step it takes except the one that
 * needs its statistical model: mojibake detection (fix_encoding: "cafÃ©" is
 * left as it is; ftfy would read "café"). The rest is done as ftfy 6 does
 * it, line by line until nothing changes: HTML entities with a ';' (not in
 * a line that has a '<'; also upper-cased ones such as &NTILDE;), C1
 * control characters read as Windows-1252, Latin ligatures split (ﬁ → fi),
 * full- and half-width forms to normal width, curly quotes straightened,
 * line breaks unified, lone surrogates replaced, terminal escapes and other
 * control characters removed, NFC. Then html.unescape twice (all of
 * Python's rules: numeric references, legacy names without ';'), spaces.
 */
export function cleanPrompt(text: string): string {
  const basic = pythonStrip(unescapeHtml(unescapeHtml(fixText(text))));
  return pythonStrip(basic.replace(WHITESPACE_RUN, ' ')).toLowerCase();
}

/** Python's str.strip(): its whitespace is White_Space plus the separators U+001C–U+001F (not U+FEFF, unlike JavaScript's \s). */
function pythonStrip(text: string): string {
  return text.replace(/^[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g, '');
}

/** \s of the `regex` module CLIP uses: the Unicode White_Space characters. */
const WHITESPACE_RUN = /[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/gu;

/** ftfy.fix_text without fix_encoding: segments up to each line break, each fixed until stable. */
function fixText(text: string): string {
  let unescape = true;
  let out = '';
  let pos = 0;
  while (pos < text.length) {
    const br = text.indexOf('\n', pos);
    const end = br < 0 ? text.length : br + 1;
    const segment = text.slice(pos, end);
    // unescape_html='auto': off for this segment, and every later one, once a '<' is seen.
    if (segment.includes('<')) unescape = false;
    out += fixSegment(segment, unescape);
    pos = end;
  }
  return out;
}

function fixSegment(segment: string, unescape: boolean): string {
  let text = segment;
  for (;;) {
    const before = text;
    if (unescape) text = text.replace(/&#?[0-9A-Za-z]{1,24};/g, ftfyEntity);
    text = text.replace(/[\x80-\x9f]/g, (c) => WINDOWS_1252[c.charCodeAt(0) - 0x80]!);
    text = text.replace(/[\u0132\u0133\u0149\u01c4-\u01cc\u01f1-\u01f3\ufb00-\ufb06]/g, (c) => LIGATURES[c] ?? c);
    text = text.replace(/[\u3000\uff01-\uffef]/g, width);
    text = text.replace(/[\u201c-\u201f]/g, '"').replace(/[\u02bc\u2018-\u201b]/g, "'");
    text = text.replace(/\r\n|[\r\u2028\u2029\x85]/g, '\n');
    text = text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
    text = text.replace(/\x1b\[((?:\p{Nd}|;)*)([a-zA-Z])/gu, '');
    text = text.replace(/[\x00-\x08\x0b\x0e-\x1f\x7f\u206a-\u206f\ufeff\ufff9-\ufffc]/g, '');
    text = text.normalize('NFC');
    if (text === before) return text;
  }
}

/** ftfy's unescape_html for one `&…;`: a known name (or an upper-cased spelling of a lower-case one), or a whole numeric reference. */
function ftfyEntity(entity: string): string {
  if (entity[1] === '#') {
    const decoded = unescapeHtml(entity);
    return decoded.includes(';') ? entity : decoded;
  }
  // Strict: only a whole name with its ';'.
  const named = decodeHTML(entity, DecodingMode.Strict);
  if (named !== entity) return named;
  // ftfy also decodes an all-lower-case name written in upper case, where html.unescape leaves that spelling alone (&NTILDE; → Ñ).
  const lower = entity.toLowerCase();
  const lowerNamed = decodeHTML(lower, DecodingMode.Strict);
  return entity === entity.toUpperCase() && lowerNamed !== lower && unescapeHtml(entity) === entity ? lowerNamed.toUpperCase() : entity;
}

const CHARREF = /&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)/gu;

/**
 * Python's html.unescape. Its references are the ones its own pattern finds
 * (CHARREF), each decoded by the HTML standard's rules as `entities` does
 * (legacy names without ';' by longest prefix; 0, surrogates and code
 * points past U+10FFFF to U+FFFD; 0x80–0x9F as Windows-1252). One rule is
 * Python's own: a numeric reference to a control character or a
 * non-character is dropped, where the standard keeps it.
 */
export function unescapeHtml(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(CHARREF, (ref: string, body: string) => (body[0] === '#' && droppedCodePoint(body) ? '' : decodeHTML(ref, DecodingMode.Legacy)));
}

/** Python's _invalid_codepoints, less 0x80–0x9F (its Windows-1252 table comes first): for the digits after '&'. */
function droppedCodePoint(body: string): boolean {
  const cp = body[1] === 'x' || body[1] === 'X' ? parseInt(body.slice(2), 16) : parseInt(body.slice(1), 10);
  return (cp >= 0x1 && cp <= 0x8) || cp === 0xb || (cp >= 0xe && cp <= 0x1f) || cp === 0x7f || (cp >= 0xfdd0 && cp <= 0xfdef) || (cp <= 0x10ffff && (cp & 0xfffe) === 0xfffe);
}

/** 0x80–0x9F read as Windows-1252 (the five bytes it leaves undefined stay themselves, as in ftfy's sloppy codec and html.unescape). */
const WINDOWS_1252 = [
  '\u20ac', '\x81', '\u201a', '\u0192', '\u201e', '\u2026', '\u2020', '\u2021', '\u02c6', '\u2030', '\u0160', '\u2039', '\u0152', '\x8d', '\u017d', '\x8f',
  '\x90', '\u2018', '\u2019', '\u201c', '\u201d', '\u2022', '\u2013', '\u2014', '\u02dc', '\u2122', '\u0161', '\u203a', '\u0153', '\x9d', '\u017e', '\u0178',
];

/** ftfy's Latin ligatures and legacy digraphs. */
const LIGATURES: Readonly<Record<string, string>> = {
  '\u0132': 'IJ',
  '\u0133': 'ij',
  '\u0149': '\u02bcn',
  '\u01f1': 'DZ',
  '\u01f2': 'Dz',
  '\u01f3': 'dz',
  '\u01c4': 'D\u017d',
  '\u01c5': 'D\u017e',
  '\u01c6': 'd\u017e',
  '\u01c7': 'LJ',
  '\u01c8': 'Lj',
  '\u01c9': 'lj',
  '\u01ca': 'NJ',
  '\u01cb': 'Nj',
  '\u01cc': 'nj',
  '\ufb00': 'ff',
  '\ufb01': 'fi',
  '\ufb02': 'fl',
  '\ufb03': 'ffi',
  '\ufb04': 'ffl',
  '\ufb05': '\u017ft',
  '\ufb06': 'st',
};

/** ftfy's fix_character_width: the ideographic space to a space, half- and full-width forms (U+FF01–U+FFEF) to their NFKC form. */
function width(c: string): string {
  return c === '\u3000' ? ' ' : c.normalize('NFKC');
}
