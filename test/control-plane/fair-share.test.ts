// Heavy tenants take turns at the API (control-plane/http/fair-gate.ts),
// through the public API against a real runner: an account keeping three
// capsules' execs in flight runs them side by side while it is alone, and one
// at a time (CAPSULE_FAIR_HEAVY_SLOTS=1) while a light account is active,
// whose requests never wait. The runner's executed_at and duration_ms say
// when each exec really ran.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { start, type Api } from './harness.js';

interface Ran {
  from: number;
  to: number;
}

/** The most execs that ran at one moment. */
function maxOverlap(runs: Ran[]): number {
  const edges = runs.flatMap((r) => [
    [r.from, 1],
    [r.to, -1],
  ]);
  // Ends before starts at the same instant: back to back is not overlap.
  edges.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let n = 0;
  let max = 0;
  for (const [, d] of edges) max = Math.max(max, (n += d!));
  return max;
}

/**
 * Three workers, one capsule each, running `sleep 0.3` back to back until `until`; what ran after `from`.
 * On a loaded machine each exec takes longer: the phase goes on until `enough` were measured (at most 10 s more).
 */
async function heavyLoad(
  api: Api,
  key: string,
  capsules: string[],
  until: number,
  from: number,
  enough: number,
): Promise<Ran[]> {
  const runs: Ran[] = [];
  const more = (): boolean => Date.now() < until || (runs.length < enough && Date.now() < until + 10_000);
  await Promise.all(
    capsules.map(async (id) => {
      while (more()) {
        const r = await api.req('POST', `/v1/capsules/${id}/exec`, { key, json: { command: 'sleep 0.3' } });
        if (r.status !== 200) throw new Error(`heavy exec ${r.status} ${r.text}`);
        const start = Date.parse(r.body.executed_at);
        if (start >= from) runs.push({ from: start, to: start + r.body.duration_ms });
      }
    }),
  );
  return runs;
}

t.test('a heavy account takes turns while a light one is active, and only then', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client, {
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_FAIR_HEAVY_SLOTS: '1',
    CAPSULE_FAIR_LEASE_MS: '10000',
    CAPSULE_FAIR_LIGHT_WINDOW_MS: '400',
    CAPSULE_FAIR_HALF_LIFE_MS: '500',
  });
  t.teardown(s.close);
  const { api } = s;
  const heavy = await api.signup();
  const light = await api.signup();
  const capsules: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await api.req('POST', '/v1/capsules', { key: heavy.key, json: {} });
    t.equal(c.status, 201, c.text);
    capsules.push(c.body.id);
  }

  // Alone: its three execs run side by side (after 1.5 s it is heavy; nobody else asks).
  let t0 = Date.now();
  const alone = await heavyLoad(api, heavy.key, capsules, t0 + 3000, t0 + 1500, 6);
  t.ok(alone.length >= 6, `${alone.length} execs measured`);
  t.ok(maxOverlap(alone) >= 2, `alone, up to ${maxOverlap(alone)} of its execs ran at once`);

  // Beside a light account that asks every 100 ms: one exec at a time, and the light one is answered at once.
  t0 = Date.now();
  const lightMs: number[] = [];
  let heavyDone = false;
  const pinger = (async () => {
    while (!heavyDone) {
      const a = performance.now();
      const r = await api.req('GET', '/v1/customers/me', { key: light.key });
      if (r.status !== 200) throw new Error(`light ${r.status} ${r.text}`);
      lightMs.push(performance.now() - a);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  // Mid-phase, the operator sees the heavy account's requests waiting (two of its three workers).
  const scrape = (async () => {
    await new Promise((r) => setTimeout(r, 1500));
    const m = await api.req('GET', '/metrics');
    return Number(/^capsule_fair_gate_waiting (\d+)$/m.exec(m.text)?.[1] ?? -1);
  })();
  const shared = await heavyLoad(api, heavy.key, capsules, t0 + 3000, t0 + 500, 4);
  heavyDone = true;
  await pinger;
  const waiting = await scrape;
  t.ok(waiting >= 1, `capsule_fair_gate_waiting ${waiting} mid-phase`);
  t.ok(shared.length >= 4, `${shared.length} execs measured`);
  t.equal(maxOverlap(shared), 1, 'beside a light account, one heavy exec at a time');
  const worst = Math.max(...lightMs);
  t.ok(worst < 250, `the light account's slowest answer took ${worst.toFixed(0)} ms (heavy execs take 300+)`);

  // A waiting request whose client goes away ends there: its account's load decays as usual.
  const pingFor = async (ms: number): Promise<void> => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      await api.req('GET', '/v1/customers/me', { key: light.key });
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const exec = (id: string, command: string, signal?: AbortSignal) =>
    fetch(`${api.base}/v1/capsules/${id}/exec`, {
      method: 'POST',
      headers: { authorization: `Bearer ${heavy.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command }),
      ...(signal ? { signal } : {}),
    });
  const lighted = pingFor(1500);
  const holder = exec(capsules[0]!, 'sleep 1');
  await new Promise((r) => setTimeout(r, 100));
  const gone = new AbortController();
  const abandoned = exec(capsules[1]!, 'true', gone.signal).catch(() => 'aborted');
  await new Promise((r) => setTimeout(r, 200));
  gone.abort();
  t.equal(await abandoned, 'aborted');
  t.equal((await holder).status, 200);
  await lighted;
  await new Promise((r) => setTimeout(r, 3000)); // six half-lives
  const lighted2 = pingFor(1500);
  const again = await Promise.all(
    capsules.slice(0, 2).map(async (id) => {
      const asked = Date.now();
      const r = await api.req('POST', `/v1/capsules/${id}/exec`, { key: heavy.key, json: { command: 'sleep 0.5' } });
      const start = Date.parse(r.body.executed_at);
      return { from: start, to: start + r.body.duration_ms, waited: start - asked };
    }),
  );
  await lighted2;
  t.equal(maxOverlap(again), 2, 'its load forgotten, the account is light again: side by side beside a light one');
  const waited = Math.max(...again.map((r) => r.waited));
  t.ok(waited < 400, `and at once: the later one started ${waited} ms after it was asked`);

  for (const id of capsules) await api.req('DELETE', `/v1/capsules/${id}`, { key: heavy.key });
});
