// Billing over real HTTP on SQLite and PostgreSQL: checkout through the real
// `stripe` SDK against a local HTTPS stand-in of the Stripe API, webhook
// events signed with the SDK's own test helper; forged, stale and replayed
// events change nothing; a paid checkout reaches tier, limits and rate limits.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Stripe from 'stripe';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { checkoutCompletedEvent, startStripeStandIn, subscriptionDeletedEvent } from '../helpers/stripe.js';
import { DRIVERS, envelope, start, type Api } from './harness.js';

const noRunner = new RunnerClient(join(tmpdir(), `cp-no-runner-billing-${process.pid}.sock`));
const SECRET_KEY = 'sk_test_capsule_standin';
const WEBHOOK_SECRET = 'whsec_capsule_test_secret';

function signed(payload: string, secret = WEBHOOK_SECRET, timestamp?: number): string {
  return Stripe.webhooks.generateTestHeaderString({
    payload,
    secret,
    ...(timestamp !== undefined ? { timestamp } : {}),
  });
}

async function deliver(api: Api, event: unknown, header?: string): Promise<Awaited<ReturnType<Api['req']>>> {
  const payload = JSON.stringify(event);
  return api.req('POST', '/v1/billing/webhook', {
    raw: payload,
    headers: { 'content-type': 'application/json', 'stripe-signature': header ?? signed(payload) },
  });
}

for (const driver of DRIVERS) {
  t.test(`${driver}: billing through Stripe`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cp-stripe-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const stripe = await startStripeStandIn(dir, SECRET_KEY);
    t.teardown(stripe.close);
    const s = await start(driver, noRunner, {
      CAPSULE_STRIPE_SECRET_KEY: SECRET_KEY,
      CAPSULE_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
      CAPSULE_STRIPE_PRICE_STARTER: 'price_starter_monthly',
      CAPSULE_STRIPE_PRICE_BUSINESS: 'price_business_monthly',
      CAPSULE_STRIPE_API_BASE: stripe.base,
      CAPSULE_STRIPE_CA_FILE: stripe.caFile,
    });
    t.teardown(s.close);
    const { api } = s;

    await t.test('checkout: a Checkout Session for the tier, expiring in 24 h, Idempotency-Key honoured', async (t) => {
      const u = await api.signup();
      const before = stripe.seen.length;
      const r = await api.req('POST', '/v1/billing/checkout', {
        key: u.key,
        json: { tier: 'team' },
        headers: { 'idempotency-key': 'chk-1' },
      });
      t.equal(r.status, 200, r.text);
      t.equal(r.body.tier, 'business', 'external name team is wire name business');
      t.match(r.body.checkout_session_id, /^cs_test_/);
      t.equal(r.body.checkout_url, `https://checkout.stripe.com/c/pay/${r.body.checkout_session_id}`);
      const ttl = Date.parse(r.body.expires_at) - Date.now();
      t.ok(ttl > 86400_000 - 120_000 && ttl <= 86400_000, `expires in 24 h (${ttl} ms)`);
      t.equal(stripe.seen.length, before + 1, 'one API call');
      const call = stripe.seen[stripe.seen.length - 1]!;
      t.equal(call.path, '/v1/checkout/sessions');
      t.equal(call.authorization, `Bearer ${SECRET_KEY}`);
      t.equal(call.form.mode, 'subscription');
      t.equal(call.form['line_items[0][price]'], 'price_business_monthly');
      t.equal(call.form['metadata[customer_id]'], u.customer_id);
      t.equal(call.form['metadata[tier]'], 'business');
      t.equal(call.form['subscription_data[metadata][customer_id]'], u.customer_id);
      t.equal(call.form.client_reference_id, u.customer_id);
      t.equal(call.idempotencyKey, `${u.customer_id}:chk-1`, 'the Idempotency-Key reaches Stripe per customer');
      t.match(call.form.success_url, /^http:\/\/127\.0\.0\.1:\d+\/billing\/success/);

      const again = await api.req('POST', '/v1/billing/checkout', {
        key: u.key,
        json: { tier: 'team' },
        headers: { 'idempotency-key': 'chk-1' },
      });
      t.equal(again.status, 200);
      t.equal(again.headers.get('idempotent-replayed'), 'true');
      t.equal(again.body.checkout_session_id, r.body.checkout_session_id, 'same session');
      t.equal(stripe.seen.length, before + 1, 'no second API call');
      const other = await api.req('POST', '/v1/billing/checkout', {
        key: u.key,
        json: { tier: 'developer' },
        headers: { 'idempotency-key': 'chk-1' },
      });
      t.match(envelope(t, other, 400, 'invalid_parameters').message, /^Idempotency-Key/);

      const dev = await api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'starter' } });
      t.equal(dev.status, 200);
      t.equal(stripe.seen[stripe.seen.length - 1]!.form['line_items[0][price]'], 'price_starter_monthly');
    });

    await t.test('checkout: bad tiers name tier; processor failure is 503 and changes nothing', async (t) => {
      const u = await api.signup();
      const ent = envelope(
        t,
        await api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'enterprise' } }),
        400,
        'invalid_parameters',
      );
      t.match(ent.message, /^tier: .*not self-service/);
      for (const tier of ['platinum', 'free', 42]) {
        const e = envelope(
          t,
          await api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier } }),
          400,
          'invalid_parameters',
        );
        t.match(e.message, /^tier: /, String(tier));
      }
      envelope(t, await api.req('POST', '/v1/billing/checkout', { key: u.key, json: {} }), 400, 'invalid_parameters');
      envelope(t, await api.req('POST', '/v1/billing/checkout', { json: { tier: 'team' } }), 401, 'invalid_api_key');
      stripe.failNext(500, 3);
      const down = await api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'team' } });
      envelope(t, down, 503, 'service_unavailable');
      t.notMatch(down.text, /stand-in failure/, 'the processor message stays internal');
      const me = await api.req('GET', '/v1/customers/me', { key: u.key });
      t.equal(me.body.tier, 'free');
    });

    await t.test('webhook: a paid checkout moves tier, limits and rate limit at once', async (t) => {
      const s2 = await start(
        driver,
        noRunner,
        { CAPSULE_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET, CAPSULE_RATE_LIMITS: 'on' },
        s.db,
      );
      t.teardown(s2.close);
      const u = await api.signup();
      // Free: 20 requests a minute; use them all on the rate-limited process. PostgreSQL's windows are
      // aligned to the clock's minutes: a burst that straddled a window's end is done again in the new one.
      let over;
      for (;;) {
        const minute = Math.floor(Date.now() / 60_000);
        for (let i = 0; i < 20; i++) await s2.api.req('GET', '/v1/customers/me', { key: u.key });
        over = await s2.api.req('GET', '/v1/customers/me', { key: u.key });
        if (over.status === 429 || Math.floor(Date.now() / 60_000) === minute) break;
      }
      envelope(t, over, 429, 'rate_limited');
      const ev = checkoutCompletedEvent({ customerId: u.customer_id, tier: 'business', subscription: 'sub_team_1' });
      const t0 = Date.now();
      const r = await deliver(s2.api, ev);
      t.equal(r.status, 200, r.text);
      t.same(r.body, { received: true });
      const me = await s2.api.req('GET', '/v1/customers/me', { key: u.key });
      t.equal(me.status, 200, 'the Team rate limit applies to the very next request');
      t.equal(me.body.tier, 'business');
      t.equal(me.body.limits.rate_limit_rpm, 1200);
      t.equal(me.body.limits.capsules_per_month, 50000);
      t.equal(me.body.usage.cdp_limit, null);
      t.ok(Date.now() - t0 < 10_000, 'within 10 s');
      // And the other process (no shared memory) sees it too.
      t.equal((await api.req('GET', '/v1/customers/me', { key: u.key })).body.tier, 'business');
      const burst = await Promise.all(
        Array.from({ length: 30 }, () => s2.api.req('GET', '/v1/customers/me', { key: u.key })),
      );
      t.equal(burst.filter((b) => b.status === 200).length, 30, 'well past the Free limit');

      // Subscription ends (cancelled at period end): back to free.
      const end = await deliver(api, subscriptionDeletedEvent('sub_team_1'));
      t.equal(end.status, 200);
      if (driver === 'postgresql') {
        // Both processes count into one window through PostgreSQL, and Free's 20 are long spent in it.
        envelope(t, await s2.api.req('GET', '/v1/customers/me', { key: u.key }), 429, 'rate_limited');
        t.equal((await s.cp.store.getAccount(u.customer_id))?.tier, 'free');
        return;
      }
      const after = await api.req('GET', '/v1/customers/me', { key: u.key });
      t.equal(after.body.tier, 'free');
      t.equal(after.body.limits.rate_limit_rpm, 20);
      t.equal(after.body.usage.cdp_limit, 100);
    });

    await t.test('webhook: forged, tampered, stale and replayed events change nothing', async (t) => {
      const u = await api.signup();
      const tier = async (): Promise<string> => (await api.req('GET', '/v1/customers/me', { key: u.key })).body.tier;
      const ev = checkoutCompletedEvent({ customerId: u.customer_id, tier: 'business' });
      const payload = JSON.stringify(ev);
      const forged = await deliver(api, ev, signed(payload, 'whsec_not_the_secret'));
      t.match(envelope(t, forged, 400, 'invalid_parameters').message, /^Stripe-Signature/);
      const tampered = payload.replace('"tier":"business"', '"tier":"starter"');
      t.not(tampered, payload);
      const tamperedRes = await api.req('POST', '/v1/billing/webhook', {
        raw: tampered,
        headers: { 'content-type': 'application/json', 'stripe-signature': signed(payload) },
      });
      envelope(t, tamperedRes, 400, 'invalid_parameters');
      const stale = await deliver(api, ev, signed(payload, WEBHOOK_SECRET, Math.floor(Date.now() / 1000) - 3600));
      envelope(t, stale, 400, 'invalid_parameters');
      const unsigned = await api.req('POST', '/v1/billing/webhook', {
        raw: payload,
        headers: { 'content-type': 'application/json' },
      });
      t.match(envelope(t, unsigned, 400, 'invalid_parameters').message, /^Stripe-Signature/);
      t.equal(await tier(), 'free', 'nothing changed');

      // An unpaid (async payment) completion changes nothing either.
      const unpaid = checkoutCompletedEvent({ customerId: u.customer_id, tier: 'business', paymentStatus: 'unpaid' });
      t.equal((await deliver(api, unpaid)).status, 200);
      t.equal(await tier(), 'free');

      // The genuine event applies once; its replay (same id, even re-signed, even altered) is ignored.
      t.equal((await deliver(api, ev)).status, 200);
      t.equal(await tier(), 'business');
      const sub = (ev.data as any).object.subscription as string;
      t.equal((await deliver(api, subscriptionDeletedEvent(sub, 'evt_cancel_once'))).status, 200);
      t.equal(await tier(), 'free');
      const replay = await deliver(api, ev);
      t.equal(replay.status, 200, 'a replay is acknowledged (Stripe stops retrying)');
      t.equal(await tier(), 'free', 'the replayed upgrade did not apply again');
      const altered = {
        ...ev,
        data: { object: { ...(ev.data as any).object, metadata: { customer_id: u.customer_id, tier: 'starter' } } },
      };
      t.equal((await deliver(api, altered)).status, 200);
      t.equal(await tier(), 'free', 'same event id with other content: ignored');
    });

    await t.test(
      'webhook: an event for an unknown account or an old subscription is acknowledged, nothing else',
      async (t) => {
        const u = await api.signup();
        t.equal(
          (await deliver(api, checkoutCompletedEvent({ customerId: 'cus_nobody', tier: 'business' }))).status,
          200,
        );
        t.equal(
          (
            await deliver(
              api,
              checkoutCompletedEvent({ customerId: u.customer_id, tier: 'starter', subscription: 'sub_a' }),
            )
          ).status,
          200,
        );
        t.equal(
          (
            await deliver(
              api,
              checkoutCompletedEvent({ customerId: u.customer_id, tier: 'business', subscription: 'sub_b' }),
            )
          ).status,
          200,
        );
        // The replaced Developer subscription ends: the account stays on Team.
        t.equal((await deliver(api, subscriptionDeletedEvent('sub_a'))).status, 200);
        t.equal((await api.req('GET', '/v1/customers/me', { key: u.key })).body.tier, 'business');
        t.equal(
          (await deliver(api, { id: 'evt_other', object: 'event', type: 'invoice.paid', data: { object: {} } })).status,
          200,
        );
      },
    );
  });

  t.test(`${driver}: billing without Stripe settings answers 503 naming the setting`, async (t) => {
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const u = await s.api.signup();
    const c = envelope(
      t,
      await s.api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'team' } }),
      503,
      'service_unavailable',
    );
    t.match(c.message, /CAPSULE_STRIPE_SECRET_KEY/);
    // Enterprise is refused as a bad request before configuration matters.
    envelope(
      t,
      await s.api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'enterprise' } }),
      400,
      'invalid_parameters',
    );
    const payload = JSON.stringify(checkoutCompletedEvent({ customerId: u.customer_id, tier: 'business' }));
    const w = envelope(
      t,
      await s.api.req('POST', '/v1/billing/webhook', {
        raw: payload,
        headers: { 'content-type': 'application/json', 'stripe-signature': signed(payload) },
      }),
      503,
      'service_unavailable',
    );
    t.match(w.message, /CAPSULE_STRIPE_WEBHOOK_SECRET/);
    const s2 = await start(driver, noRunner, { CAPSULE_STRIPE_SECRET_KEY: SECRET_KEY }, s.db);
    const p = envelope(
      t,
      await s2.api.req('POST', '/v1/billing/checkout', { key: u.key, json: { tier: 'developer' } }),
      503,
      'service_unavailable',
    );
    await s2.close();
    t.match(p.message, /CAPSULE_STRIPE_PRICE_STARTER/);
    t.equal((await s.api.req('GET', '/v1/customers/me', { key: u.key })).body.tier, 'free');
  });
}
