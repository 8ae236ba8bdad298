// `npm run soak`: the full hostile-tenant soak (5 attacker accounts x 4
// capsules for 5 minutes beside one victim account; test/soak/soak.ts).
// Prints the victim's lifecycle latency idle and under attack, and every failure.
import { runSoak } from '../test/soak/soak.js';

const minutes = Number(process.env.SOAK_MINUTES ?? 5);
const report = await runSoak({
  durationMs: minutes * 60_000,
  accounts: 5,
  capsulesPerAccount: 4,
  idleLifecycles: 30,
  log: (l) => console.log(l),
});
const ratio = report.underAttack.p99 / report.idle.p99;
console.log(JSON.stringify({ ...report, p99_ratio: Math.round(ratio * 100) / 100 }, null, 2));
console.log(
  `victim lifecycle p50 ${report.idle.p50.toFixed(0)} -> ${report.underAttack.p50.toFixed(0)} ms, p99 ${report.idle.p99.toFixed(0)} -> ${report.underAttack.p99.toFixed(0)} ms (${ratio.toFixed(2)}x idle; bound 2x); failures: ${report.failures.length}`,
);
process.exit(report.failures.length === 0 && ratio < 2 ? 0 : 1);
