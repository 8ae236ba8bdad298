// Store conformance: one battery of checks on the storage ports (Store,
// KeyStore, UsageStore), run per database (SQLite and PostgreSQL) without
// the runner or HTTP, so a new storage backend proves itself by passing the
// same list (the idea of trillian's storage testers). Covers round trips,
// compare-and-set moves, limits and one-time uses under concurrency
// (reservations, activity appends, key limits, TOTP steps, recovery codes),
// pagination, usage totals and idempotency claims.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { openStores, type Stores } from '../../control-plane/store/index.js';
import type {
  Capsule,
  CapsuleStatus,
  KeyStore,
  Limits,
  NewAccount,
  NewApiKey,
  Store,
  UsageStore,
} from '../../control-plane/domain/index.js';
import { DRIVERS, freshDb, type Driver } from './harness.js';

const T0 = '2026-11-01T00:00:00.000000Z';
const hex = (n: number): string => randomBytes(n).toString('hex');

function account(tag: string): NewAccount {
  return {
    customer_id: `cus_${tag}_${hex(4)}`,
    email: `${tag}-${hex(4)}@example.com`,
    tier: 'starter',
    jurisdiction: 'EU',
    key_hash: hex(32),
    key_id: `key_${hex(6)}`,
    key_prefix: 'cap_test_',
    key_mode: 'live',
    created_at: T0,
    billing_cycle_start: T0,
  };
}

const LIMITS: Limits = {
  capsules_per_month: 5,
  max_ttl_seconds: 3600,
  concurrent_capsules: 3,
  rate_limit_rpm: 60,
  upload_max_bytes: 1 << 20,
  cdp_limit: null,
};

function capsule(customerId: string, i: number, createdAt = T0): Capsule {
  return {
    id: `cap_${hex(8)}_${i}`,
    customer_id: customerId,
    status: 'active',
    api_form: 'capsule',
    ttl_seconds: 600,
    created_at: createdAt,
    expires_at: '2026-11-01T00:10:00.000000Z',
    data_classification: 'PHI',
    jurisdiction: 'EU',
    capsulefile_id: null,
    capsulefile_content_hash: null,
    egress_profile_id: null,
    metadata: { team: 'a', n: String(i) },
    execution_count: 0,
    bytes_processed: 0,
    destroyed_at: null,
    billable: true,
  };
}

const usage = (kind: 'capsule' | 'exec', quantity = 1) => ({ id: `use_${hex(8)}`, kind, quantity, at: T0 });

async function conformance(t: Test, store: Store): Promise<void> {
  await t.test('accounts round-trip and keys find their caller', async (t) => {
    const a = account('acct');
    const created = await store.createAccount(a);
    t.equal(created.customer_id, a.customer_id);
    t.same((await store.getAccount(a.customer_id))?.email, a.email);
    const caller = await store.findCallerByKeyHash(a.key_hash, T0, T0);
    t.equal(caller?.account.customer_id, a.customer_id);
    t.equal(caller?.key_mode, 'live');
    t.equal(await store.findCallerByKeyHash(hex(32), T0, T0), null, 'unknown key hash');
    t.equal(await store.getAccount('cus_missing'), null);
  });

  await t.test('reservations respect the limits, also when raced', async (t) => {
    const a = account('reserve');
    await store.createAccount(a);
    const outcomes = await Promise.all(
      Array.from({ length: 8 }, () => store.reserveCapsule(a.customer_id, LIMITS, T0, true)),
    );
    t.equal(outcomes.filter((o) => o === 'ok').length, 3, 'exactly the concurrent limit succeeds');
    t.ok(
      outcomes.filter((o) => o !== 'ok').every((o) => o === 'concurrent_capsules'),
      'the rest name the limit',
    );
    t.equal((await store.getAccount(a.customer_id))?.live_capsules, 3);
    await store.releaseLive(a.customer_id);
    await store.releaseLive(a.customer_id);
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, true), 'ok');
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, true), 'ok');
    // 5 counted this month now: the month limit answers before the live one.
    await store.releaseLive(a.customer_id);
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, true), 'capsules_per_month');
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, false), 'ok', 'a test-key capsule is not counted');
    const acc = await store.getAccount(a.customer_id);
    t.equal(acc?.capsules_used_this_month, 5);
    await store.unreserveCapsule(a.customer_id, true);
    t.equal((await store.getAccount(a.customer_id))?.capsules_used_this_month, 4, 'unreserve gives the month back');
  });

  await t.test('capsules round-trip; status moves are compare-and-set', async (t) => {
    const a = account('caps');
    await store.createAccount(a);
    const c = capsule(a.customer_id, 1);
    t.equal(
      await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: { ttl: 600 } }, usage('capsule')),
      'ok',
    );
    t.same(await store.getCapsule(c.id), c, 'every field comes back as written');
    t.equal(await store.getCapsule('cap_missing'), null);
    t.equal(await store.transition(c.id, ['active'], 'executing'), true);
    t.equal(await store.transition(c.id, ['active'], 'executing'), false, 'a second move from the old status fails');
    const raced = await Promise.all([
      store.transition(c.id, ['executing'], 'active'),
      store.transition(c.id, ['executing'], 'active'),
    ]);
    t.same(raced.filter(Boolean).length, 1, 'of two racing moves exactly one wins');
    await store.addUsage(c.id, 2, 300, usage('exec', 12));
    const after = await store.getCapsule(c.id);
    t.equal(after?.execution_count, 2);
    t.equal(after?.bytes_processed, 300);
    t.ok(
      (await store.liveCapsules()).some((x) => x.id === c.id),
      'live',
    );
    t.ok(
      (await store.expiredLiveCapsules('2026-11-01T00:10:00.000001Z')).some((x) => x.id === c.id),
      'expired',
    );
    t.notOk((await store.expiredLiveCapsules('2026-11-01T00:09:59.999999Z')).some((x) => x.id === c.id));
  });

  await t.test('activity is numbered from 1 without gaps, also when raced', async (t) => {
    const a = account('act');
    await store.createAccount(a);
    const c = capsule(a.customer_id, 1);
    await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: {} }, usage('capsule'));
    const events = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        store.appendActivity(c.id, 'ExecutionCompleted', T0, { i }, { executions: 1, bytes: 10 }),
      ),
    );
    t.same(
      events.map((e) => e!.seq).sort((x, y) => x - y),
      Array.from({ length: 10 }, (_, i) => i + 2),
    );
    const trail = await store.activity(c.id);
    t.same(
      trail.map((e) => e.seq),
      Array.from({ length: 11 }, (_, i) => i + 1),
      'the trail reads back in order',
    );
    t.equal(trail[0]?.type, 'CapsuleCreated');
    const after = await store.getCapsule(c.id);
    t.equal(after?.execution_count, 10, 'side effects applied with each event');
    t.equal(after?.bytes_processed, 100);
    await store.appendActivity(c.id, 'Destroying', T0, {}, { move: { from: ['executing'], to: 'destroyed' } });
    t.equal((await store.getCapsule(c.id))?.status, 'active', 'a move from a status the capsule is not in is a no-op');
  });

  await t.test('the activity cap holds when raced; dropped events are counted with their side effects', async (t) => {
    const a = account('cap');
    await store.createAccount(a);
    const c = capsule(a.customer_id, 1);
    await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: {} }, usage('capsule'));
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        store.appendActivity(c.id, i === 0 ? 'First' : 'Chunk', T0, { i }, { executions: 1, cap: 5 }),
      ),
    );
    t.equal(results.filter((r) => r !== null).length, 4, 'stored up to the cap (5 with CapsuleCreated)');
    const page = await store.activityPage(c.id, 0, 100);
    t.same(
      page.map((e) => e.seq),
      [1, 2, 3, 4, 5],
    );
    t.same(await store.activityPage(c.id, 2, 2).then((p) => p.map((e) => e.seq)), [3, 4], 'pages after a seq');
    const drops = await store.activityDrops(c.id);
    t.equal(drops.dropped_events, 8, 'the rest is counted');
    t.type(drops.first_dropped_type, 'string');
    t.equal((await store.getCapsule(c.id))?.execution_count, 12, 'side effects of dropped events still apply');
    t.not(await store.appendActivity(c.id, 'Forced', T0, {}), null, 'an uncapped event is stored past the cap');
  });

  await t.test('listing pages through every capsule once, newest first', async (t) => {
    const a = account('list');
    await store.createAccount(a);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const c = capsule(a.customer_id, i, `2026-11-01T00:00:0${i}.000000Z`);
      ids.push(c.id);
      await store.insertCapsule(c, { type: 'CapsuleCreated', at: c.created_at, fields: {} }, usage('capsule'));
    }
    const other = account('other');
    await store.createAccount(other);
    await store.insertCapsule(
      capsule(other.customer_id, 99),
      { type: 'CapsuleCreated', at: T0, fields: {} },
      usage('capsule'),
    );
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const page = await store.listCapsules(a.customer_id, 3, cursor);
      t.ok(page.items.length <= 3);
      seen.push(...page.items.map((c) => c.id));
      cursor = page.next_cursor;
      if (!cursor) break;
    }
    t.same(seen, [...ids].reverse(), 'all seven, newest first, none of another customer');
  });

  /** Nothing older than this is forgotten or taken for dead in these cases unless they say so. */
  const OLD = '2026-10-31T00:00:00.000000Z';

  await t.test('idempotency: one claim wins, a replay sees the stored response', async (t) => {
    const a = account('idem');
    await store.createAccount(a);
    const claim = (key: string, hash: string, notBefore = OLD) =>
      store.claimIdempotency(a.customer_id, key, hash, T0, notBefore, OLD);
    const key = `idem-${hex(4)}`;
    const claims = await Promise.all([claim(key, 'h1'), claim(key, 'h1')]);
    t.same(claims.map((c) => c.state).sort(), ['claimed', 'pending'], 'one claimant, one sees it pending');
    const response = { status: 201, body: '{"id":"cap_x"}', headers: { 'content-type': 'application/json' } };
    await store.completeIdempotency(a.customer_id, key, response);
    const replay = await claim(key, 'h1');
    t.equal(replay.state, 'done');
    if (replay.state === 'done') {
      t.same(replay.response, response);
      t.equal(replay.request_hash, 'h1');
    }
    const key2 = `idem-${hex(4)}`;
    t.equal((await claim(key2, 'h2', T0)).state, 'claimed');
    await store.releaseIdempotency(a.customer_id, key2);
    t.equal((await claim(key2, 'h2', T0)).state, 'claimed', 'released keys can be claimed');
  });

  await t.test('idempotency: a pending claim not renewed is taken over exactly once', async (t) => {
    const a = account('idem-takeover');
    await store.createAccount(a);
    const key = `idem-${hex(4)}`;
    const at = (s: number): string => new Date(Date.parse(T0) + s * 1000).toISOString().replace('Z', '000Z');
    // A retry at `now` takes over a claim not renewed since `staleBefore`.
    const claim = (now: string, staleBefore: string) =>
      store.claimIdempotency(a.customer_id, key, 'h1', now, OLD, staleBefore);
    t.equal((await claim(T0, OLD)).state, 'claimed');
    await store.renewIdempotency(a.customer_id, key, at(4));
    // Renewed at +4 s: at +8 s with a 6 s bound it is alive.
    t.equal((await claim(at(8), at(2))).state, 'pending');
    // Not renewed since +4 s: at +20 s two retries race, one takes it over.
    const claims = await Promise.all([claim(at(20), at(14)), claim(at(20), at(14))]);
    t.same(claims.map((c) => c.state).sort(), ['claimed', 'pending'], 'one retry takes the claim over');
    const won = claims.find((c) => c.state === 'claimed');
    t.same(won, { state: 'claimed', resource_id: null, request_hash: 'h1' }, 'nothing was created under it');
  });

  await t.test('leases: one holder at a time, renewed by it, free once expired or released', async (t) => {
    const name = `job-${hex(4)}`;
    const t1 = '2026-11-01T00:00:01.000000Z';
    const t5 = '2026-11-01T00:00:05.000000Z';
    const raced = await Promise.all([store.claimLease(name, 'cp_a', T0, t5), store.claimLease(name, 'cp_b', T0, t5)]);
    t.equal(raced.filter((x) => x).length, 1, 'exactly one of two racing control planes holds it');
    const [holder, other] = raced[0] ? ['cp_a', 'cp_b'] : ['cp_b', 'cp_a'];
    t.equal(await store.claimLease(name, holder, t1, t5), true, 'the holder renews');
    t.equal(await store.claimLease(name, other, t1, t5), false, 'the other waits');
    t.equal(
      await store.claimLease(name, other, '2026-11-01T00:00:06.000000Z', '2026-11-01T00:00:10.000000Z'),
      true,
      'after expiry it is taken over',
    );
    await store.releaseLease(name, holder);
    t.equal(await store.claimLease(name, holder, t1, t5), false, "releasing someone else's lease does nothing");
    await store.releaseLease(name, other);
    t.equal(await store.claimLease(name, holder, t1, t5), true, 'a released lease is free at once');
  });

  await t.test('rate windows count across callers, per key and per window', async (t) => {
    const key = `cus:${hex(4)}`;
    const counts = await Promise.all(Array.from({ length: 5 }, () => store.countRateHit(key, 60_000)));
    t.same([...counts].sort(), [1, 2, 3, 4, 5], 'concurrent hits each get their own count');
    t.equal(await store.countRateHit(key, 120_000), 1, 'a new window starts at 1');
    t.equal(await store.countRateHit(`${key}x`, 60_000), 1, 'keys are apart');
  });

  await t.test('a second proof for one capsule is a conflict and writes nothing', async (t) => {
    const a = account('twice');
    await store.createAccount(a);
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, true), 'ok');
    const c = capsule(a.customer_id, 1);
    t.equal(await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: {} }, usage('capsule')), 'ok');
    const proof = (n: number) => ({
      proof_id: `prf_${hex(8)}`,
      capsule_id: c.id,
      customer_id: a.customer_id,
      record: { n },
      response: null,
      partial: false,
      created_at: T0,
    });
    const destroy = (n: number, from: CapsuleStatus[]) =>
      store.recordDestruction({
        capsule: c,
        from,
        status: 'destroyed',
        destroyed_at: T0,
        proof: proof(n),
        key: null,
        usage: { id: `use_${hex(8)}`, kind: 'proof', quantity: 1, at: T0 },
      });
    await destroy(1, ['active']);
    // Past the status check (from 'destroyed'), the proof row itself must refuse the second one.
    await t.rejects(destroy(2, ['destroyed']), { code: 'resource_conflict' });
    t.same((await store.getProofByCapsule(c.id))?.record, { n: 1 }, 'the first proof stands');
    t.equal((await store.getAccount(a.customer_id))?.cdps_this_cycle, 1, 'counted once: the second wrote nothing');
  });

  await t.test('two-phase signing: a buffered proof moves the status at once and is stored exactly once', async (t) => {
    const a = account('pending');
    await store.createAccount(a);
    t.equal(await store.reserveCapsule(a.customer_id, LIMITS, T0, true), 'ok');
    const c = capsule(a.customer_id, 1);
    t.equal(await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: {} }, usage('capsule')), 'ok');
    const pending = {
      capsule_id: c.id,
      customer_id: a.customer_id,
      proof_id: `prf_${hex(8)}`,
      partial: false,
      billable: true,
      input: { capsule_id: c.id, destroyed_at: T0, evidence: [{ n: 1 }] },
      response: { capsule_id: c.id, status: 'destroyed' },
      created_at: T0,
      signed_at: null,
    };
    await store.recordDestruction({
      capsule: c,
      from: ['active'],
      status: 'destroyed',
      destroyed_at: T0,
      proof: null,
      pending,
      key: null,
      usage: null,
    });
    t.equal((await store.getCapsule(c.id))?.status, 'destroyed', 'the wipe is recorded in phase 1');
    t.equal((await store.getAccount(a.customer_id))?.live_capsules, 0, 'the live slot is released');
    t.equal(await store.getProofByCapsule(c.id), null, 'no proof yet');
    t.same(await store.getPendingProof(c.id), pending, 'the unsigned input comes back as written');
    t.ok((await store.unsignedProofs(1000)).some((p) => p.capsule_id === c.id));

    const proof = {
      proof_id: pending.proof_id,
      capsule_id: c.id,
      customer_id: a.customer_id,
      record: { signed: true },
      response: { ...pending.response, cdp: { signed: true } },
      partial: false,
      created_at: '2026-11-01T00:00:05.000000Z',
    };
    const use = { id: `use_${hex(8)}`, kind: 'proof' as const, quantity: 1, at: T0 };
    // Two processes racing to store it: exactly one wins, the other writes nothing.
    const wins = await Promise.all([
      store.completePendingProof(pending, proof, use, []),
      store.completePendingProof(
        pending,
        { ...proof, record: { signed: 'twice' } },
        { ...use, id: `use_${hex(8)}` },
        [],
      ),
    ]);
    t.same(
      wins.filter((w) => w),
      [true],
      'one winner',
    );
    const stored = await store.getProofByCapsule(c.id);
    t.ok(stored && [true, 'twice'].includes((stored.record as { signed: boolean | string }).signed));
    t.equal((await store.getPendingProof(c.id))?.signed_at, proof.created_at, 'marked signed');
    t.notOk(
      (await store.unsignedProofs(1000)).some((p) => p.capsule_id === c.id),
      'no longer due',
    );
    t.equal(
      await store.completePendingProof(pending, proof, { ...use, id: `use_${hex(8)}` }, []),
      false,
      'never twice',
    );
    t.equal((await store.getAccount(a.customer_id))?.cdps_this_cycle, 1, 'the proof is counted once');
  });
}

function apiKey(customerId: string, createdAt = T0): NewApiKey {
  return {
    record: {
      id: `key_${hex(6)}`,
      customer_id: customerId,
      prefix: 'cap_live_',
      mode: 'live',
      created_at: createdAt,
      last_used_at: null,
      revoked_at: null,
    },
    key_hash: hex(32),
  };
}

async function keyConformance(t: Test, store: Store, keys: KeyStore): Promise<void> {
  await t.test('keys: the active-key limit holds when raced; the last live key is kept', async (t) => {
    const a = account('keys');
    await store.createAccount(a);
    const outcomes = await Promise.all(
      Array.from({ length: 6 }, () => keys.insertApiKey(apiKey(a.customer_id, '2026-11-02T00:00:00.000000Z'), 3)),
    );
    // The account's first key (from createAccount) counts: two more fit.
    t.equal(outcomes.filter((o) => o === 'ok').length, 2, 'exactly up to the limit');
    const page = await keys.listApiKeys(a.customer_id, 10, null);
    t.equal(page.items.length, 3);
    for (const k of page.items.slice(0, 2)) t.equal(await keys.revokeApiKey(a.customer_id, k.id, T0), 'revoked');
    t.equal(await keys.revokeApiKey(a.customer_id, page.items[2]!.id, T0), 'last_live_key');
    t.equal(await keys.revokeApiKey(a.customer_id, page.items[0]!.id, T0), 'already_revoked');
    t.equal(await keys.revokeApiKey(a.customer_id, 'key_missing', T0), 'missing');
    t.equal(await store.findCallerByKeyHash(a.key_hash, T0, T0).then((c) => c?.key_id), a.key_id, 'the kept key works');
  });

  await t.test('MFA: TOTP steps only move forward and a recovery code works once, also when raced', async (t) => {
    const a = account('mfa');
    await store.createAccount(a);
    const factor = {
      customer_id: a.customer_id,
      secret_sealed: 'sealed',
      state: 'pending' as const,
      created_at: T0,
      activated_at: null,
      last_step: null,
      recovery_codes_remaining: 2,
    };
    t.equal(await keys.putPendingMfa(factor, ['rc1', 'rc2']), 'ok');
    t.equal(await keys.activateMfa(a.customer_id, T0), true);
    t.equal(await keys.putPendingMfa(factor, ['rc3']), 'active', 'an active factor is not replaced');
    const steps = await Promise.all([keys.acceptTotpStep(a.customer_id, 100), keys.acceptTotpStep(a.customer_id, 100)]);
    t.same(steps.filter(Boolean).length, 1, 'one of two racing uses of a step wins');
    t.equal(await keys.acceptTotpStep(a.customer_id, 99), false, 'an older step is refused');
    t.equal(await keys.acceptTotpStep(a.customer_id, 101), true);
    const used = await Promise.all([
      keys.useRecoveryCode(a.customer_id, 'rc1', T0),
      keys.useRecoveryCode(a.customer_id, 'rc1', T0),
    ]);
    t.same(used.filter(Boolean).length, 1, 'a recovery code works once');
    t.equal(await keys.useRecoveryCode(a.customer_id, 'rc-unknown', T0), false);
    t.equal((await keys.getMfa(a.customer_id))?.recovery_codes_remaining, 1);
  });
}

async function usageConformance(t: Test, store: Store, usageStore: UsageStore): Promise<void> {
  await t.test('usage items written with their events list oldest first and add up', async (t) => {
    const a = account('usage');
    await store.createAccount(a);
    const c = capsule(a.customer_id, 1);
    await store.insertCapsule(c, { type: 'CapsuleCreated', at: T0, fields: {} }, usage('capsule'));
    for (let i = 0; i < 5; i++)
      await store.appendActivity(
        c.id,
        'ExecutionCompleted',
        T0,
        {},
        {
          executions: 1,
          bytes: 7,
          usage: { id: `use_${hex(8)}`, kind: 'exec', quantity: 10 + i, at: `2026-11-01T00:00:0${i + 1}.000000Z` },
        },
      );
    const seen: number[] = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 10; pages++) {
      const page = await usageStore.listUsage(a.customer_id, { from: null, to: null, limit: 2, cursor });
      seen.push(...page.items.map((u) => (u.kind === 'exec' ? u.quantity : 0)));
      cursor = page.next_cursor;
      if (!cursor) break;
    }
    t.same(seen, [0, 10, 11, 12, 13, 14], 'every item once, oldest first');
    const totals = await usageStore.usageTotals(a.customer_id, T0);
    t.same(totals.live.exec, { events: 5, quantity: 60 });
    t.same(totals.live.capsule, { events: 1, quantity: 1 });
    t.equal(totals.bytes_processed, 35);
  });
}

for (const driver of DRIVERS as Driver[]) {
  t.test(`store conformance on ${driver}`, async (t) => {
    const db = await freshDb(driver);
    const stores: Stores = await openStores(
      driver === 'sqlite' ? { driver, file: db.url.replace(/^file:/, '') } : { driver, url: db.url },
    );
    t.teardown(async () => {
      await stores.store.close();
      await db.drop();
    });
    await conformance(t, stores.store);
    await keyConformance(t, stores.store, stores.keys);
    await usageConformance(t, stores.store, stores.usage);
  });
}
