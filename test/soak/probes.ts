// What the soak checks on every answer, shared by the attackers' driver and
// the victim's thread: a request must answer in time and never with a 5xx
// (503 with Retry-After is a bound, not a failure); a destroy must carry a
// verifying AuditProof that counts every execution answered.
import { verifyProof } from '../../shared/proof/index.js';
import { createNodeCrypto } from '../../shared/node/crypto-node.js';
import type { Res } from '../control-plane/harness.js';

export interface Probes {
  failures: string[];
  /** Error answers by status and code (expected: bounds doing their job). */
  refusals: Record<string, number>;
  verified: { count: number };
  call(what: string, f: () => Promise<Res>, timeoutMs?: number): Promise<Res | null>;
  checkDestroy(what: string, r: Res | null, execsAnswered: number): void;
}

export function makeProbes(): Probes {
  const crypto = createNodeCrypto();
  const failures: string[] = [];
  const refusals: Record<string, number> = {};
  const verified = { count: 0 };
  return {
    failures,
    refusals,
    verified,
    async call(what, f, timeoutMs = 120_000) {
      let timer: NodeJS.Timeout | undefined;
      const hang = new Promise<null>((res) => {
        timer = setTimeout(() => res(null), timeoutMs);
      });
      try {
        const r = await Promise.race([f(), hang]);
        if (r === null) {
          failures.push(`${what}: no answer within ${timeoutMs} ms`);
          return null;
        }
        if (r.status >= 500 && !(r.status === 503 && r.headers.get('retry-after')))
          failures.push(`${what}: ${r.status} ${r.text.slice(0, 200)}`);
        if (r.status >= 400) {
          const k = `${r.status} ${r.body?.error?.code ?? '?'}`;
          refusals[k] = (refusals[k] ?? 0) + 1;
        }
        return r;
      } catch (e) {
        failures.push(`${what}: ${(e as Error).message}`);
        return null;
      } finally {
        clearTimeout(timer);
      }
    },
    checkDestroy(what, r, execsAnswered) {
      if (!r || r.status !== 200) {
        if (r) failures.push(`${what}: destroy answered ${r.status} ${r.text.slice(0, 200)}`);
        return;
      }
      const v = verifyProof(r.body.audit_proof, { crypto });
      if (!v.valid) failures.push(`${what}: audit_proof does not verify: ${JSON.stringify(v.failure_reason)}`);
      else verified.count++;
      if (r.body.total_executions < execsAnswered)
        failures.push(`${what}: ${execsAnswered} execs answered but total_executions ${r.body.total_executions}`);
    },
  };
}
