// The order the exec thread takes its requests in (exec-thread.ts): round
// robin by tenant (fair-queue.ts), a light tenant's request first
// (light-tenants.ts: its short exec or upload never waits a round of busy
// tenants' process starts), and starts ahead of time only while the spawner
// has room. Each tenant's own requests keep their order.
import type { FairQueue } from './fair-queue.js';

/** Starts ahead of time handed to the spawner at once, at most (exec-thread.ts says why). */
export const MAX_STARTING = 2;

interface Ordered {
  op: string;
  /** The tenant was light when the request was made. */
  light?: boolean;
}

/** Sandboxes and writers started ahead of time: the requests the spawner bound holds back. */
function startsAhead(m: Ordered): boolean {
  return m.op === 'prepare' || m.op === 'wprepare';
}

/** The next request to handle, or undefined when none may go now (`starting`: the spawner's unanswered starts). */
export function nextRequest<T extends Ordered>(waiting: FairQueue<T>, starting: number): T | undefined {
  const room = starting < MAX_STARTING;
  const may = (m: T): boolean => room || !startsAhead(m);
  return waiting.shift((m) => m.light === true && may(m)) ?? waiting.shift(may);
}
