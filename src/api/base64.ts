/**
 * Base64 as clients send it in JSON: the standard or URL-safe alphabet,
 * padding optional, nothing else. Node's decoder silently skips characters
 * outside the alphabet, so a corrupted payload would decode to wrong bytes
 * instead of failing: check the text first. Returns undefined when it is not
 * base64 (the caller raises its own error naming the field).
 */
export function decodeBase64Strict(text: string): Buffer | undefined {
  if (text.length === 0) return Buffer.alloc(0);
  // A length of 4n + 1 (padding aside) cannot come from any byte string.
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text) || text.replace(/=+$/, '').length % 4 === 1) return undefined;
  return Buffer.from(text, /[-_]/.test(text) ? 'base64url' : 'base64');
}
