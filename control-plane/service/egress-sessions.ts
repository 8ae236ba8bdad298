// The running sealed egress layers of this control plane, one per capsule
// with an egress profile. Each proxy event is appended to the capsule's
// activity trail as it happens, strictly in emission order (one promise chain
// per capsule). stop() ends the proxy, waits for the trail to catch up and
// returns the key destruction evidence for chain step 4.
import type { EgressActivity, EgressSpec, RunningEgress } from '../domain/index.js';
import type { Deps } from './deps.js';
import { usageEntry } from './usage.js';
import { activityCap } from './activity.js';

interface Session {
  egress: RunningEgress;
  trail: Promise<void>;
  recorded: number;
  failed: number;
  stopped: Promise<Record<string, unknown>> | null;
}

export interface Gate {
  promise: Promise<void>;
  open(): void;
  close(): void;
}

/** Events wait behind the gate until the capsule row exists; a closed gate drops them (the capsule never came to be). */
export function gate(): Gate {
  let open!: () => void;
  let close!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    open = res;
    close = rej;
  });
  promise.catch(() => undefined);
  return { promise, open: () => open(), close: () => close(new Error('capsule was not created')) };
}

export class EgressSessions {
  private readonly sessions = new Map<string, Session>();
  constructor(private readonly d: Deps) {}

  /** True when this install can start sealed egress layers. */
  get available(): boolean {
    return this.d.egress !== null;
  }

  async start(spec: EgressSpec, ready: Gate): Promise<RunningEgress> {
    const launcher = this.d.egress;
    if (!launcher) throw new Error('egress is not configured');
    let session: Session | null = null;
    const pending: EgressActivity[] = [];
    // The returned promise settles once the event is stored: the proxy bounds how many are unsettled.
    const record = (e: EgressActivity): Promise<void> | undefined => {
      if (!session) {
        pending.push(e);
        return undefined;
      }
      const s = session;
      const { type, at, ...fields } = e;
      s.trail = s.trail
        .then(() => ready.promise)
        // Each request through the sealed layer is a billable event: its usage item goes in with its event.
        .then(() =>
          this.d.store.appendActivity(spec.capsuleId, type, at, fields, {
            cap: activityCap(this.d),
            ...(type === 'SealedHttpRequest' ? { usage: usageEntry(this.d, 'egress_request', 1, at) } : {}),
          }),
        )
        .then(
          () => {
            s.recorded++;
          },
          (err: unknown) => {
            s.failed++;
            this.d.log.error(
              { capsule_id: spec.capsuleId, event_type: type, err },
              'egress: activity event not recorded',
            );
          },
        );
      return s.trail;
    };
    const egress = await launcher.start(spec, record);
    session = { egress, trail: Promise.resolve(), recorded: 0, failed: 0, stopped: null };
    this.sessions.set(spec.capsuleId, session);
    for (const e of pending.splice(0)) record(e);
    return egress;
  }

  has(capsuleId: string): boolean {
    return this.sessions.has(capsuleId);
  }

  /** Waits until every event emitted so far is in the trail (or failed to be). */
  async flush(capsuleId: string): Promise<void> {
    const s = this.sessions.get(capsuleId);
    if (!s) return;
    let seen: Promise<void> | null = null;
    while (seen !== s.trail) {
      seen = s.trail;
      await seen;
    }
  }

  /**
   * Stops the capsule's proxy (idempotent; a retried destroy gets the same
   * evidence) after which no further events come, and flushes the trail.
   * null when this process runs no proxy for the capsule.
   */
  async stop(capsuleId: string): Promise<Record<string, unknown> | null> {
    const s = this.sessions.get(capsuleId);
    if (!s) return null;
    s.stopped ??= s.egress.stop().then(async (keys) => {
      await this.flush(capsuleId);
      return { ...keys, activity_events_recorded: s.recorded, activity_events_not_recorded: s.failed };
    });
    return s.stopped;
  }

  /** Drops the session once the capsule's proof is stored. */
  forget(capsuleId: string): void {
    this.sessions.delete(capsuleId);
  }

  /** Stops every proxy (control plane shutdown); their capsules lose egress. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.sessions.keys()].map((id) => this.stop(id).catch(() => null)));
    this.sessions.clear();
  }
}
