// Bytes handed to another thread are moved (transferred), not copied, when
// they span their whole ArrayBuffer. A view into a larger buffer, such as
// a small Buffer from Node's shared pool, must never be moved: it gets a
// buffer of its own first.

/** `b` itself when it spans its whole ArrayBuffer (safe to transfer), else a copy that does. */
export function ownBuffer(b: Uint8Array): Uint8Array {
  return b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b : new Uint8Array(b);
}
