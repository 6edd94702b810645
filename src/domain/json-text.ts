/**
 * JSON text must be UTF-8 (RFC 8259 §8.1). A lossy decode would turn invalid bytes into U+FFFD and
 * store or deliver something the sender never wrote, so every JSON input is decoded strictly.
 */

/** The end of the message for JSON text that is not UTF-8, after what it was ("The request body "). */
export const NOT_UTF8 = 'is not valid UTF-8; JSON must be UTF-8 (RFC 8259)';

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The text of `bytes`, or undefined when they are not valid UTF-8 (never a replacement character). */
export function decodeUtf8(bytes: Uint8Array): string | undefined {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}
