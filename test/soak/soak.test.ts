// The hostile-tenant soak in its short form: attacker accounts run the
// nastiest known workloads in real capsules while a victim account's
// lifecycle latency is measured idle and under attack (test/soak/soak.ts).
// The full form (5 accounts x 4 capsules, 5 minutes) is `npm run soak`.
import t from 'tap';
import { runSoak } from './soak.js';

t.test('one account attacking does not degrade another', async (t) => {
  const report = await runSoak({
    durationMs: Number(process.env.SOAK_SHORT_MS ?? 45_000),
    accounts: 3,
    capsulesPerAccount: 3,
    // As many as the full form: of fewer than 100, p99 is simply the maximum (about 5 s here).
    idleLifecycles: 100,
    log: (l) => t.comment(l),
  });
  t.comment(
    JSON.stringify({
      idle: report.idle,
      underAttack: report.underAttack,
      rounds: report.rounds,
      victimClient: report.victimClient,
    }),
  );
  t.same(report.failures, [], 'no 5xx, hang, unverifiable proof or lost execution');
  for (const [name, rounds] of Object.entries(report.rounds)) t.ok(rounds > 0, `${name} ran at least one round`);
  t.ok(report.underAttack.n >= 5, 'the victim kept completing lifecycles during the attacks');
  // The bound (victim p99 under 2x idle) is enforced by the full form, `npm run soak`
  // (1.45-1.70x on this host, docs/PERFORMANCE.md, stop 36). This form reports the
  // ratio rather than asserting it (3.2-5.3x here): its one control-char-flood capsule
  // runs at a rate the full form's fair gate never lets it reach, and its 45 s are
  // mostly the attacks' start.
  t.comment(
    `victim p99 ${(report.underAttack.p99 / report.idle.p99).toFixed(2)}x idle under attack (bound 2x in npm run soak)`,
  );
  t.ok(report.underAttack.p99 < 30_000, 'every victim lifecycle under attack finished within 30 s');
});
